// Sha256 (OpenSSL's libcrypto behind our interface) against the FIPS 180-4 / NIST example vectors, fed whole and in
// awkward pieces.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "src/core/sha256.h"

using nb::Sha256;

namespace {

std::string sha_hex(const std::string& s) { return Sha256::hex_of(s.data(), s.size()); }

}  // namespace

TEST_CASE("sha256: NIST vectors") {
    CHECK(sha_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(sha_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    // 448 bits: the padding must spill into a second block.
    CHECK(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
          "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    // 896 bits (two blocks of message).
    CHECK(sha_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrs"
                  "tnopqrstu") == "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST_CASE("sha256: one million 'a' in odd-sized chunks") {
    const std::string expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
    const std::vector<char> a(1000000, 'a');
    for (size_t chunk : {size_t{1000000}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{997}}) {
        CAPTURE(chunk);
        Sha256 h;
        size_t done = 0;
        while (done < a.size()) {
            size_t n = std::min(chunk, a.size() - done);
            h.update(a.data() + done, n);
            done += n;
        }
        CHECK(Sha256::hex(h.digest()) == expected);
    }
}

TEST_CASE("sha256: lengths around the padding boundary agree however they are fed") {
    // 55, 56, 63, 64 bytes sit at the edges of "length fits in this block" vs "needs another block".
    for (size_t len : {55, 56, 57, 63, 64, 65, 119, 120, 128}) {
        CAPTURE(len);
        std::string msg(len, 'x');
        for (size_t i = 0; i < len; i++) msg[i] = static_cast<char>('a' + i % 26);
        Sha256 bytewise;
        for (char c : msg) bytewise.update(&c, 1);
        CHECK(Sha256::hex(bytewise.digest()) == sha_hex(msg));
    }
    // Two known ones: 64 'a's and 56 'a's (values from sha256sum).
    CHECK(sha_hex(std::string(64, 'a')) == "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
    CHECK(sha_hex(std::string(56, 'a')) == "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
}

TEST_CASE("sha256: digest resets for the next message") {
    Sha256 h;
    h.update("abc", 3);
    (void)h.digest();
    h.update("abc", 3);
    CHECK(Sha256::hex(h.digest()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("sha256: a message given as pieces hashes as their concatenation") {
    const std::string a(100, 'a'), b(1000, 'b'), c = "c";
    CHECK(Sha256::hex_of(std::vector<std::string_view>{a, "", b, c}) == sha_hex(a + b + c));
    CHECK(Sha256::hex_of(std::vector<std::string_view>{}) == sha_hex(""));
}
