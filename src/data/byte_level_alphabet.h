// GPT-2's byte-to-unicode table: how a byte-level BPE's tokenizer.json spells bytes as printable characters.
//
// A byte-level BPE merges bytes, but its vocabulary and merges are stored as JSON strings, and a byte such as 0x20
// (space) or 0x0A would be unreadable there. So every byte b is renamed to one visible code point:
//   - the printable Latin-1 bytes keep their own code point: 0x21..0x7E ('!'..'~'), 0xA1..0xAC, 0xAE..0xFF;
//   - the other 68 bytes (0x00..0x20, 0x7F..0xA0, 0xAD), in increasing order, become U+0100, U+0101, ... U+0143.
// So the space 0x20 is U+0120 'Ġ' and the newline 0x0A is U+010A 'Ċ'. The renaming is one-to-one, so a token's
// bytes are its characters mapped back through the table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace nb {

// The code point that spells byte b.
char32_t byte_to_unicode(uint8_t b);

// The bytes a token of the vocabulary (UTF-8 text in the table's alphabet) stands for, or nothing when one of its
// characters is not in the table (an added token such as "<|im start|>", whose bytes are then its own UTF-8).
std::optional<std::string> byte_level_token_bytes(std::string_view token);

}  // namespace nb
