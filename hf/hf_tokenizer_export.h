// hf/hf_tokenizer_export.h — the tokenizer files of an exported Hugging Face directory, so that
// `AutoTokenizer.from_pretrained(dir)` and `AutoModelForCausalLM.from_pretrained(dir).generate`
// work from it (transformers 4.40):
//   tokenizer.json          a copy of the run's byte-level BPE tokenizer (data.tokenizer)
//   tokenizer_config.json   tokenizer_class PreTrainedTokenizerFast, model_max_length = the
//                           context (model.seq_len), clean_up_tokenization_spaces false (decode
//                           gives back exactly the bytes, as `moezero generate` does), and
//                           bos/eos = <|endoftext|> when the tokenizer has it (GPT-2's
//                           convention; scripts/prepare_data.py starts every document with it)
//   special_tokens_map.json the same special tokens (what save_pretrained writes)
//   generation_config.json  bos_token_id / eos_token_id = the <|endoftext|> id, so generate
//                           stops there as `moezero generate` does (only with that token)
// No post-processor is added: encoding a prompt gives the same ids as hf/bpe_tokenizer.h.
#pragma once

#include <cstdint>
#include <string>

namespace moezero::hf {

// [in] tokenizer_json: a tokenizer.json that hf/bpe_tokenizer.h loads (checked; errors name
// the file); [in] out_dir: an existing export directory; [in] context: model.seq_len.
// [in] vocab_size: the model's; a tokenizer with more ids is refused naming both.
void export_hf_tokenizer(const std::string& tokenizer_json, const std::string& out_dir,
                         int64_t context, int64_t vocab_size);

}  // namespace moezero::hf
