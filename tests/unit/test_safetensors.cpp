// safetensors (src/core/safetensors.h): named tensors and metadata round-trip bit for bit in the layout the
// reference writes (u64 length, a space-padded JSON header, the data in the order given); bf16 and f16 widen to
// float32 exactly; every way an untrusted header can be wrong is one nb::RuntimeError naming the file and the
// tensor, never a crash or a read outside the bytes (each case below, then a bounded randomized search).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "src/core/error.h"
#include "src/core/safetensors.h"
#include "tests/unit/sample_tensors.h"
#include "tests/unit/test_util.h"

namespace nb {

namespace {

using test::runtime_error;

using test::same_bits;
using Sample = test::SampleTensors;

// A file of the given header text (padded as the reference pads it) and data bytes.
std::string file_of(std::string header, const std::string& data) {
    header.append((8 - header.size() % 8) % 8, ' ');
    const uint64_t n = header.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

std::string error_of(const std::string& header, const std::string& data) {
    return runtime_error([&] { parse_safetensors(file_of(header, data), "f.safetensors"); });
}

}  // namespace

TEST_CASE("safetensors: tensors and metadata round-trip in the order given, bit for bit, 8-byte aligned data") {
    const Sample s;
    const auto named = s.named();
    const std::map<std::string, std::string> metadata{{"format", "pt"}, {"nobubble.stage", "1"}};
    const std::string bytes = encode_safetensors(named, metadata);
    uint64_t header_bytes;
    std::memcpy(&header_bytes, bytes.data(), 8);
    CHECK(header_bytes % 8 == 0);
    CHECK(bytes.substr(8, 15) == R"({"__metadata__")");
    const SafetensorsView view = parse_safetensors(bytes, "mem");
    CHECK(view.metadata == metadata);
    REQUIRE(view.tensors.size() == named.size());
    uint64_t offset = 0;
    for (size_t i = 0; i < named.size(); ++i) {
        const SafetensorsEntry& e = view.tensors[i];
        CHECK(e.name == named[i].first);
        CHECK(e.begin == offset);
        offset = e.end;
        CHECK(e.shape == named[i].second->shape());
        CHECK(same_bits(view.as_stored(e), *named[i].second));
        CHECK(&view.at(e.name) == &e);
    }
    CHECK(view.at("exp_avg.b").dtype == SafetensorsDType::bf16);
    CHECK(view.find("absent") == nullptr);
    CHECK(runtime_error([&] { view.at("absent"); }) == "'mem': no tensor 'absent'");
    const auto decoded = decode_safetensors(bytes, "mem");
    REQUIRE(decoded.size() == named.size());
    for (size_t i = 0; i < named.size(); ++i) CHECK(same_bits(decoded[i].tensor, *named[i].second));
    // No metadata: no "__metadata__"; no tensors: a valid empty file.
    CHECK(parse_safetensors(encode_safetensors(named), "mem").metadata.empty());
    CHECK(encode_safetensors({}) == file_of("{}", ""));
    CHECK(parse_safetensors(encode_safetensors({}), "mem").tensors.empty());
    CHECK_THROWS_AS(encode_safetensors({{"a", &s.w}, {"a", &s.b}}), std::invalid_argument);
    CHECK_THROWS_AS(encode_safetensors({{"", &s.w}}), std::invalid_argument);
    CHECK_THROWS_AS(encode_safetensors({{"__metadata__", &s.w}}), std::invalid_argument);
}

TEST_CASE("safetensors: the exact bytes the reference writes for one tensor") {
    Tensor t = Tensor::zeros({2}, DType::f32);
    t.f32()[0] = 1.0f;
    t.f32()[1] = -2.0f;
    const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    const std::string data("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
    CHECK(encode_safetensors({{"x", &t}}) == file_of(header, data));
}

TEST_CASE("safetensors pieces: the data is viewed where it lies, and the pieces join to the file") {
    const Sample s;
    const auto named = s.named();
    const SafetensorsPieces file(named, {{"k", "v"}});
    REQUIRE(file.pieces().size() == 1 + named.size());
    for (size_t i = 0; i < named.size(); ++i)
        CHECK(static_cast<const void*>(file.pieces()[1 + i].data()) == named[i].second->data());
    CHECK(file.joined() == encode_safetensors(named, {{"k", "v"}}));
    CHECK(file.bytes() == file.joined().size());
}

TEST_CASE("safetensors: bf16 and f16 widen to float32 exactly") {
    CHECK(bf16_to_f32(0x3f80) == 1.0f);
    CHECK(bf16_to_f32(0xc040) == -3.0f);
    CHECK(f16_to_f32(0x3c00) == 1.0f);
    CHECK(f16_to_f32(0xc000) == -2.0f);
    CHECK(f16_to_f32(0x7bff) == 65504.0f);                      // the largest half
    CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));         // the smallest subnormal
    CHECK(f16_to_f32(0x03ff) == std::ldexp(1023.0f, -24));      // the largest subnormal
    CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));         // the smallest normal
    CHECK(std::signbit(f16_to_f32(0x8000)));
    CHECK(f16_to_f32(0x8000) == 0.0f);
    CHECK(f16_to_f32(0x7c00) == std::numeric_limits<float>::infinity());
    CHECK(f16_to_f32(0xfc00) == -std::numeric_limits<float>::infinity());
    CHECK(std::isnan(f16_to_f32(0x7e00)));
    // Through a file: F16 and BF16 read as float32; F16 has no tensor type of its own.
    const std::string header = R"({"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                               R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[4,6]},)"
                               R"("i":{"dtype":"I32","shape":[],"data_offsets":[6,10]}})";
    const std::string bytes = file_of(header, std::string("\x00\x3c\x00\xc0\x80\x3f\x07\x00\x00\x00", 10));
    const SafetensorsView view = parse_safetensors(bytes, "h.safetensors");
    const Tensor h = view.as_f32(view.at("h"));
    CHECK(h.f32()[0] == 1.0f);
    CHECK(h.f32()[1] == -2.0f);
    CHECK(view.as_f32(view.at("b")).f32()[0] == 1.0f);
    CHECK(view.as_stored(view.at("i")).i32()[0] == 7);
    CHECK(runtime_error([&] { view.as_stored(view.at("h")); }) ==
          "'h.safetensors': tensor 'h' is F16, which nobubble holds only as float32");
    CHECK(runtime_error([&] { view.as_f32(view.at("i")); }) ==
          "'h.safetensors': tensor 'i' is I32, not a floating-point tensor");
}

TEST_CASE("safetensors: each kind of bad header is one error naming the file and the tensor") {
    const std::string t8 = R"("dtype":"F32","shape":[2],"data_offsets":)";
    const std::string d8(8, '\0');
    // The file's frame.
    CHECK(runtime_error([] { parse_safetensors("abc", "f.safetensors"); }) ==
          "'f.safetensors': not a safetensors file: 3 bytes, fewer than the 8 of the header's length");
    std::string huge_header = file_of(R"({"a":{)" + t8 + "[0,8]}}", d8);
    const uint64_t n = huge_header.size();  // the header's length: the whole file, more than follows it
    std::memcpy(huge_header.data(), &n, 8);
    CHECK(runtime_error([&] { parse_safetensors(huge_header, "f.safetensors"); }) ==
          fmt::format("'f.safetensors': not a safetensors file: a header of {} bytes is larger than the file ({} "
                      "bytes)", n, n));
    CHECK(error_of("[1, 2]", "") == "'f.safetensors': not a safetensors file: its header does not begin with '{'");
    CHECK(error_of(R"({"a": )", "").find("'f.safetensors': JSON parse error") == 0);
    CHECK(error_of(R"({"a":{)" + t8 + R"([0,8]},"a":{)" + t8 + "[0,8]}}", d8) ==
          "'f.safetensors': JSON object names key 'a' twice");
    // One tensor's entry.
    CHECK(error_of(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", d8) ==
          "'f.safetensors': tensor 'a' has dtype 'F64', which nobubble does not read (F32, BF16, F16, I32)");
    CHECK(error_of(R"({"a":{)" + t8 + "[0,16]}}", d8) ==
          "'f.safetensors': tensor 'a' has data_offsets [0, 16] past the end of the data (8 bytes)");
    CHECK(error_of(R"({"a":{)" + t8 + "[8,0]}}", d8) ==
          "'f.safetensors': tensor 'a' has data_offsets [8, 0] that end before they begin");
    CHECK(error_of(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8) ==
          "'f.safetensors': tensor 'a' F32 [3] needs 12 bytes, its data_offsets [0, 8] hold 8");
    CHECK(error_of(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", d8) ==
          "'f.safetensors': tensor 'a' F32 [4611686018427387904, 4] needs more than 8 bytes, its data_offsets [0, 8] "
          "hold 8");
    CHECK(error_of(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8) ==
          "'f.safetensors': tensor 'a' has a dimension -2 that is not a non-negative integer");
    CHECK(error_of(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", d8) ==
          "'f.safetensors': tensor 'a' has a dimension 2.0 that is not a non-negative integer");
    CHECK(error_of(R"({"a":{"dtype":"F32","shape":[2]}})", d8) == "'f.safetensors': tensor 'a' has no 'data_offsets'");
    CHECK(error_of(R"({"a":{)" + t8 + "[0]}}", d8) ==
          "'f.safetensors': tensor 'a' has data_offsets [0], not [begin, end]");
    CHECK(error_of(R"({"a":[]})", "") == "'f.safetensors': tensor 'a' is an array, not an object");
    CHECK(error_of(R"({"__metadata__":{"k":1}})", "") ==
          "'f.safetensors': '__metadata__' field 'k' is a number, not a string");
    // The tensors together: they cover the data exactly.
    CHECK(error_of(R"({"a":{)" + t8 + R"([0,8]},"b":{)" + t8 + "[4,12]}}", std::string(12, '\0')) ==
          "'f.safetensors': tensor 'b' (bytes 4 to 12) overlaps tensor 'a' (bytes 0 to 8)");
    CHECK(error_of(R"({"a":{)" + t8 + R"([0,8]},"b":{)" + t8 + "[0,8]}}", d8) ==
          "'f.safetensors': tensor 'b' (bytes 0 to 8) overlaps tensor 'a' (bytes 0 to 8)");
    CHECK(error_of(R"({"a":{)" + t8 + "[4,12]}}", std::string(12, '\0')) ==
          "'f.safetensors': tensor 'a' begins at byte 4: bytes 0 to 4 of the data belong to no tensor");
    CHECK(error_of(R"({"a":{)" + t8 + "[0,8]}}", std::string(12, '\0')) ==
          "'f.safetensors': bytes 8 to 12 of the data belong to no tensor");
}

TEST_CASE("safetensors: random damage never crashes or reads outside the bytes (3000 cases)") {
    const Sample s;
    const std::string good = encode_safetensors(s.named(), {{"format", "pt"}});
    const auto decode = [](const std::string& bytes) {
        const SafetensorsView view = parse_safetensors(bytes, "fuzz.safetensors");
        for (const SafetensorsEntry& e : view.tensors)
            if (e.dtype != SafetensorsDType::f16) view.as_stored(e);
    };
    const test::FuzzCounts n = test::fuzz_decode(good, 20261205, 400, "fuzz.safetensors", decode);
    CHECK(n.refused > 1000);
    CHECK(n.accepted > 0);
}

}  // namespace nb
