#include "src/core/json.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <iterator>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

namespace {

constexpr int kMaxDepth = 64;

class Parser {
public:
    Parser(std::string_view text, const std::string& source) : s_(text), source_(source) {}

    JsonValue document() {
        JsonValue v = value(0);
        skip_space();
        if (at_ != s_.size()) fail("text after the JSON value");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw RuntimeError(fmt::format("'{}': JSON {} at byte {}", source_, what, at_));
    }
    void skip_space() {
        while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r')) ++at_;
    }
    char peek() {
        skip_space();
        if (at_ >= s_.size()) fail("ends too early");
        return s_[at_];
    }
    void expect(std::string_view word) {
        if (s_.substr(at_, word.size()) != word) fail(fmt::format("expects '{}'", word));
        at_ += word.size();
    }

    JsonValue value(int depth) {
        if (depth > kMaxDepth) fail(fmt::format("nests deeper than {} levels", kMaxDepth));
        switch (peek()) {
            case '{': return object(depth);
            case '[': return array(depth);
            case '"': return JsonValue(string());
            case 't': expect("true"); return JsonValue(true);
            case 'f': expect("false"); return JsonValue(false);
            case 'n': expect("null"); return JsonValue();
            default: return JsonValue(number());
        }
    }

    JsonValue object(int depth) {
        ++at_;  // {
        JsonValue::Object members;
        if (peek() == '}') {
            ++at_;
            return JsonValue(std::move(members));
        }
        for (;;) {
            if (peek() != '"') fail("expects a string key");
            const size_t key_at = at_;
            std::string key = string();
            if (members.count(key)) {
                at_ = key_at;  // the error points at the repeated key
                fail(fmt::format("has the key '{}' twice", key));
            }
            if (peek() != ':') fail("expects ':'");
            ++at_;
            members.emplace(std::move(key), value(depth + 1));
            const char c = peek();
            ++at_;
            if (c == '}') return JsonValue(std::move(members));
            if (c != ',') fail("expects ',' or '}'");
        }
    }

    JsonValue array(int depth) {
        ++at_;  // [
        JsonValue::Array items;
        if (peek() == ']') {
            ++at_;
            return JsonValue(std::move(items));
        }
        for (;;) {
            items.push_back(value(depth + 1));
            const char c = peek();
            ++at_;
            if (c == ']') return JsonValue(std::move(items));
            if (c != ',') fail("expects ',' or ']'");
        }
    }

    uint32_t hex4() {
        if (s_.size() - at_ < 4) fail("ends inside a \\u escape");
        uint32_t code = 0;
        for (int i = 0; i < 4; ++i) {
            const char c = s_[at_++];
            code <<= 4;
            if (c >= '0' && c <= '9') code |= static_cast<uint32_t>(c - '0');
            else if (c >= 'a' && c <= 'f') code |= static_cast<uint32_t>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') code |= static_cast<uint32_t>(c - 'A' + 10);
            else fail("has a bad \\u escape");
        }
        return code;
    }

    static void append_utf8(std::string& out, uint32_t cp) {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }

    std::string string() {
        ++at_;  // "
        std::string out;
        for (;;) {
            if (at_ >= s_.size()) fail("ends inside a string");
            const char c = s_[at_++];
            if (c == '"') return out;
            if (static_cast<unsigned char>(c) < 0x20) fail("has a control character inside a string");
            if (c != '\\') {
                out += c;
                continue;
            }
            if (at_ >= s_.size()) fail("ends inside an escape");
            const char e = s_[at_++];
            const auto* shorthand = std::find_if(std::begin(kJsonShortEscapes), std::end(kJsonShortEscapes),
                                                 [e](const JsonShortEscape& x) { return x.letter == e; });
            if (shorthand != std::end(kJsonShortEscapes)) {
                out += shorthand->c;
                continue;
            }
            switch (e) {
                case '/': out += '/'; break;
                case 'u': {
                    uint32_t cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate: its low half must follow
                        expect("\\u");
                        const uint32_t low = hex4();
                        if (low < 0xDC00 || low >= 0xE000) fail("has an unpaired surrogate");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    } else if (cp >= 0xDC00 && cp < 0xE000) {
                        fail("has an unpaired surrogate");
                    }
                    append_utf8(out, cp);
                    break;
                }
                default: fail(fmt::format("has an unknown escape '\\{}'", e));
            }
        }
    }

    // RFC 8259's grammar: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
    JsonValue::Number number() {
        const size_t start = at_;
        auto digits = [&] {
            const size_t from = at_;
            while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
            return at_ > from;
        };
        if (at_ < s_.size() && s_[at_] == '-') ++at_;
        if (at_ < s_.size() && s_[at_] == '0') ++at_;
        else if (!digits()) fail("expects a value");
        if (at_ < s_.size() && s_[at_] == '.') {
            ++at_;
            if (!digits()) fail("has a number without digits after '.'");
        }
        if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
            ++at_;
            if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
            if (!digits()) fail("has a number without exponent digits");
        }
        std::string text(s_.substr(start, at_ - start));
        errno = 0;
        const double value = std::strtod(text.c_str(), nullptr);
        return {value, std::move(text)};
    }

    std::string_view s_;
    const std::string& source_;
    size_t at_ = 0;
};

const char* kind_of(const JsonValue& v) {
    if (v.is_null()) return "null";
    if (v.is_bool()) return "a boolean";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

[[noreturn]] void wrong_kind(const JsonValue& v, const std::string& source, std::string_view what, const char* want) {
    throw RuntimeError(fmt::format("'{}': field '{}' is {}, not {}", source, what, kind_of(v), want));
}

}  // namespace

const JsonValue::Object& JsonValue::object(const std::string& source, std::string_view what) const {
    if (!is_object()) wrong_kind(*this, source, what, "an object");
    return *std::get<std::shared_ptr<Object>>(v_);
}

const JsonValue::Array& JsonValue::array(const std::string& source, std::string_view what) const {
    if (!is_array()) wrong_kind(*this, source, what, "an array");
    return *std::get<std::shared_ptr<Array>>(v_);
}

const std::string& JsonValue::string(const std::string& source, std::string_view what) const {
    if (!is_string()) wrong_kind(*this, source, what, "a string");
    return std::get<std::string>(v_);
}

double JsonValue::number(const std::string& source, std::string_view what) const {
    if (!is_number()) wrong_kind(*this, source, what, "a number");
    return std::get<Number>(v_).value;
}

int64_t JsonValue::int64(const std::string& source, std::string_view what) const {
    if (!is_number()) wrong_kind(*this, source, what, "an integer");
    const std::string& text = std::get<Number>(v_).text;
    int64_t out = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    if (ec != std::errc() || end != text.data() + text.size())
        throw RuntimeError(fmt::format("'{}': field '{}' is {}, not a 64-bit integer", source, what, text));
    return out;
}

bool JsonValue::boolean(const std::string& source, std::string_view what) const {
    if (!is_bool()) wrong_kind(*this, source, what, "a boolean");
    return std::get<bool>(v_);
}

JsonValue parse_json(std::string_view text, const std::string& source) { return Parser(text, source).document(); }

const JsonValue& json_field(const JsonValue::Object& object, const std::string& key, const std::string& source) {
    const auto it = object.find(key);
    if (it == object.end()) throw RuntimeError(fmt::format("'{}': no field '{}'", source, key));
    return it->second;
}

}  // namespace nb
