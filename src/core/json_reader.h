// Reading JSON from a file we did not write, or wrote long ago (a checkpoint's manifest, a safetensors header, a
// Hugging Face config.json): nlohmann/json (Debian's nlohmann-json3-dev), a well-kept RFC 8259 parser, behind one
// function that makes every failure one nb::RuntimeError line naming the file.
//
// Stricter than the library alone: an object that names a key twice is refused (nlohmann/json would keep the last,
// silently), and so is nesting deeper than 64 levels. Integers keep their exact value up to 2^64 - 1
// (is_number_unsigned / is_number_integer), so a step or a byte count reads back exactly.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nb {

using Json = nlohmann::json;

// The one value the text holds (white space around it only), or nb::RuntimeError "'SOURCE': JSON ...".
Json read_json(std::string_view text, const std::string& source);

// object[key] of a JSON object, or nb::RuntimeError "'SOURCE': no field 'KEY'" (or "... is not a JSON object").
const Json& json_at(const Json& object, const std::string& key, const std::string& source);

// The value as that kind, or nb::RuntimeError "'SOURCE': field 'WHAT' is ..., not ..." naming what it is instead.
const Json& json_object(const Json& value, const std::string& source, std::string_view what);
const Json& json_array(const Json& value, const std::string& source, std::string_view what);
const std::string& json_string(const Json& value, const std::string& source, std::string_view what);
int64_t json_int64(const Json& value, const std::string& source, std::string_view what);  // an integer, no . or e
uint64_t json_uint64(const Json& value, const std::string& source, std::string_view what);  // >= 0
double json_number(const Json& value, const std::string& source, std::string_view what);
bool json_bool(const Json& value, const std::string& source, std::string_view what);

// What a value is, for an error line: "null", "a boolean", "a number", "a string", "an array", "an object".
const char* json_kind(const Json& value);

// Text from an untrusted file made fit for an error line: at most `max_bytes`, control bytes and bytes >= 0x80 as '?'.
std::string printable(std::string_view text, size_t max_bytes = 200);

}  // namespace nb
