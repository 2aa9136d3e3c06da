#include "src/core/json_reader.h"

#include <set>
#include <vector>

#include <fmt/format.h>

#include "src/core/error.h"

namespace nb {

namespace {

constexpr int kMaxDepth = 64;

[[noreturn]] void fail(const std::string& source, const std::string& what) {
    throw RuntimeError(fmt::format("'{}': {}", source, what));
}

// The library's message without its "[json.exception.parse_error.101] " prefix, printable.
std::string parse_message(const Json::exception& e) {
    std::string_view text = e.what();
    if (!text.empty() && text.front() == '[') {
        const size_t end = text.find("] ");
        if (end != std::string_view::npos) text.remove_prefix(end + 2);
    }
    return printable(text, 300);
}

// Refuses a key given twice in one object, and nesting deeper than kMaxDepth, as the parser meets them.
class StrictCallback {
public:
    explicit StrictCallback(const std::string& source) : source_(source) {}
    bool operator()(int depth, Json::parse_event_t event, Json& parsed) {
        if (depth > kMaxDepth) fail(source_, fmt::format("JSON nested deeper than {} levels", kMaxDepth));
        switch (event) {
            case Json::parse_event_t::object_start: keys_.emplace_back(); break;
            case Json::parse_event_t::object_end: keys_.pop_back(); break;
            case Json::parse_event_t::key:
                if (const auto& key = parsed.get_ref<const std::string&>(); !keys_.back().insert(key).second)
                    fail(source_, fmt::format("JSON object names key '{}' twice", printable(key)));
                break;
            default: break;
        }
        return true;
    }

private:
    const std::string& source_;
    std::vector<std::set<std::string>> keys_;  // of each object being read, innermost last
};

// A number is shown as written (1.5 where an integer is wanted), anything else by its kind.
[[noreturn]] void wrong_kind(const Json& value, const std::string& source, std::string_view what, const char* wanted) {
    fail(source, fmt::format("field '{}' is {}, not {}", what, value.is_number() ? value.dump() : json_kind(value),
                             wanted));
}

}  // namespace

const char* json_kind(const Json& value) {
    if (value.is_null()) return "null";
    if (value.is_boolean()) return "a boolean";
    if (value.is_number()) return "a number";
    if (value.is_string()) return "a string";
    if (value.is_array()) return "an array";
    return value.is_object() ? "an object" : "binary";
}

std::string printable(std::string_view text, size_t max_bytes) {
    std::string out;
    for (const char c : text.substr(0, max_bytes)) {
        const auto byte = static_cast<unsigned char>(c);
        out += byte >= 0x20 && byte < 0x7f ? c : '?';
    }
    if (text.size() > max_bytes) out += "...";
    return out;
}

Json read_json(std::string_view text, const std::string& source) {
    StrictCallback strict(source);
    try {
        return Json::parse(text.begin(), text.end(), std::ref(strict));
    } catch (const Json::exception& e) {
        fail(source, "JSON " + parse_message(e));
    }
}

const Json& json_at(const Json& object, const std::string& key, const std::string& source) {
    if (!object.is_object())
        fail(source, fmt::format("{} where a JSON object with '{}' was expected", json_kind(object), printable(key)));
    const auto it = object.find(key);
    if (it == object.end()) fail(source, fmt::format("no field '{}'", printable(key)));
    return *it;
}

const Json& json_object(const Json& value, const std::string& source, std::string_view what) {
    if (!value.is_object()) wrong_kind(value, source, what, "an object");
    return value;
}

const Json& json_array(const Json& value, const std::string& source, std::string_view what) {
    if (!value.is_array()) wrong_kind(value, source, what, "an array");
    return value;
}

const std::string& json_string(const Json& value, const std::string& source, std::string_view what) {
    if (!value.is_string()) wrong_kind(value, source, what, "a string");
    return value.get_ref<const std::string&>();
}

int64_t json_int64(const Json& value, const std::string& source, std::string_view what) {
    if (value.is_number_unsigned()) {
        const auto u = value.get<uint64_t>();
        if (u > static_cast<uint64_t>(INT64_MAX)) fail(source, fmt::format("field '{}' = {} is too large", what, u));
        return static_cast<int64_t>(u);
    }
    if (!value.is_number_integer()) wrong_kind(value, source, what, "an integer");
    return value.get<int64_t>();
}

uint64_t json_uint64(const Json& value, const std::string& source, std::string_view what) {
    if (value.is_number_unsigned()) return value.get<uint64_t>();
    if (value.is_number_integer()) fail(source, fmt::format("field '{}' = {} is negative", what, value.get<int64_t>()));
    wrong_kind(value, source, what, "an integer");
}

double json_number(const Json& value, const std::string& source, std::string_view what) {
    if (!value.is_number()) wrong_kind(value, source, what, "a number");
    return value.get<double>();
}

bool json_bool(const Json& value, const std::string& source, std::string_view what) {
    if (!value.is_boolean()) wrong_kind(value, source, what, "a boolean");
    return value.get<bool>();
}

}  // namespace nb
