// Reading JSON: what a checkpoint's manifest.json needs (src/core/metrics_writer.h writes JSON; this reads it
// back). A small strict reader of RFC 8259 text: objects, arrays, strings (every escape, \u with surrogate pairs,
// to UTF-8), numbers, true, false, null. Numbers keep their text as well, so that an int64 (a step, a byte count,
// a seed) reads back exactly, which a double cannot promise above 2^53.
//
// It is written for untrusted bytes (a damaged or foreign file): every error is one nb::RuntimeError
// "'SOURCE': JSON ... at byte N", nesting is limited to 64 levels, and it never reads outside the text.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace nb {

// JSON's two-character escapes but \/ (RFC 8259 section 7): a character and the letter written for it after a
// backslash. json_quote (src/core/metrics_writer.h) writes these; parse_json reads them, \/ and \uXXXX.
struct JsonShortEscape {
    char c, letter;
};
inline constexpr JsonShortEscape kJsonShortEscapes[] = {{'"', '"'},  {'\\', '\\'}, {'\n', 'n'}, {'\r', 'r'},
                                                       {'\t', 't'}, {'\b', 'b'},   {'\f', 'f'}};

class JsonValue {
public:
    using Array = std::vector<JsonValue>;
    using Object = std::map<std::string, JsonValue>;
    struct Number {
        double value;
        std::string text;  // as written
    };

    JsonValue() = default;  // null
    explicit JsonValue(bool b) : v_(b) {}
    explicit JsonValue(Number n) : v_(std::move(n)) {}
    explicit JsonValue(std::string s) : v_(std::move(s)) {}
    explicit JsonValue(Array a) : v_(std::make_shared<Array>(std::move(a))) {}
    explicit JsonValue(Object o) : v_(std::make_shared<Object>(std::move(o))) {}

    bool is_null() const { return std::holds_alternative<std::monostate>(v_); }
    bool is_object() const { return std::holds_alternative<std::shared_ptr<Object>>(v_); }
    bool is_array() const { return std::holds_alternative<std::shared_ptr<Array>>(v_); }
    bool is_string() const { return std::holds_alternative<std::string>(v_); }
    bool is_number() const { return std::holds_alternative<Number>(v_); }
    bool is_bool() const { return std::holds_alternative<bool>(v_); }

    // The value as that kind, or nb::RuntimeError "'SOURCE': field 'WHAT' ..." naming what it is instead.
    const Object& object(const std::string& source, std::string_view what) const;
    const Array& array(const std::string& source, std::string_view what) const;
    const std::string& string(const std::string& source, std::string_view what) const;
    double number(const std::string& source, std::string_view what) const;
    int64_t int64(const std::string& source, std::string_view what) const;  // an integer written without . or e
    bool boolean(const std::string& source, std::string_view what) const;

private:
    std::variant<std::monostate, bool, Number, std::string, std::shared_ptr<Array>, std::shared_ptr<Object>> v_;
};

// The one value the text holds (white space around it only), or nb::RuntimeError naming `source`.
JsonValue parse_json(std::string_view text, const std::string& source);

// object[key], or nb::RuntimeError "'SOURCE': no field 'KEY'".
const JsonValue& json_field(const JsonValue::Object& object, const std::string& key, const std::string& source);

}  // namespace nb
