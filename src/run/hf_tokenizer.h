// The tokenizer files of a Hugging Face folder (docs/formats.md, "Hugging Face folders"), for `nobubble export`:
// what transformers' AutoTokenizer.from_pretrained(DIR) reads to load a run's tokenizer.json as a fast tokenizer
// (PreTrainedTokenizerFast) with its own ids:
//   tokenizer.json            the run's file, byte for byte
//   tokenizer_config.json     tokenizer_class PreTrainedTokenizerFast, bos/eos/unk "<|endoftext|>" where the
//                             tokenizer has it, model_max_length, clean_up_tokenization_spaces and add_prefix_space,
//                             added_tokens_decoder (each added token as tokenizer.json describes it)
//   special_tokens_map.json   the bos/eos/unk tokens
// as transformers 4.46's save_pretrained writes them (keys sorted, 2-space indent).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "src/data/tokenizer_file.h"

namespace nb {

// The files (name, bytes) for `tokenizer`, whose model reads at most `model_max_length` tokens. nb::RuntimeError
// naming the file where it changed since it was read.
std::vector<std::pair<std::string, std::string>> hf_tokenizer_files(const TokenizerFile& tokenizer,
                                                                    int64_t model_max_length);

}  // namespace nb
