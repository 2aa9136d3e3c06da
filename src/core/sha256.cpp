// SHA-256 through OpenSSL's libcrypto (its EVP interface): its SHA-256 uses the CPU's SHA extensions or AVX2 where
// the CPU has them, and is kept and tested by others.
#include "src/core/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace nb {

namespace {

// libcrypto's SHA-256, looked up once.
const EVP_MD* sha256_algorithm() {
    static const EVP_MD* md = EVP_sha256();
    return md;
}

void check(int ok, const char* what) {
    if (ok != 1) throw std::runtime_error(std::string("libcrypto: ") + what + " failed");
}

}  // namespace

void Sha256::ContextFree::operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
    if (!ctx_) throw std::bad_alloc();
    reset();
}

void Sha256::reset() { check(EVP_DigestInit_ex(ctx_.get(), sha256_algorithm(), nullptr), "EVP_DigestInit_ex"); }

void Sha256::update(const void* data, size_t size_bytes) {
    if (size_bytes > 0) check(EVP_DigestUpdate(ctx_.get(), data, size_bytes), "EVP_DigestUpdate");
}

Sha256::Digest Sha256::digest() {
    Digest out;
    unsigned int size = 0;
    check(EVP_DigestFinal_ex(ctx_.get(), out.data(), &size), "EVP_DigestFinal_ex");
    if (size != out.size()) throw std::logic_error("libcrypto: SHA-256 digest of unexpected size");
    reset();
    return out;
}

std::string Sha256::hex(const Digest& digest) {
    static const char kHexDigits[] = "0123456789abcdef";
    std::string s;
    s.reserve(64);
    for (uint8_t byte : digest) {
        s.push_back(kHexDigits[byte >> 4]);
        s.push_back(kHexDigits[byte & 15]);
    }
    return s;
}

std::string Sha256::hex_of(const void* data, size_t size_bytes) {
    return hex_of(std::vector<std::string_view>{{static_cast<const char*>(data), size_bytes}});
}

std::string Sha256::hex_of(const std::vector<std::string_view>& pieces) {
    Sha256 h;
    for (const std::string_view piece : pieces) h.update(piece.data(), piece.size());
    return hex(h.digest());
}

}  // namespace nb
