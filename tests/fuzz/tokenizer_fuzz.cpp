// libFuzzer target: a Hugging Face tokenizer.json (model, merges, pre-tokenizer,
// added tokens, post-processor), then encoding and decoding a fixed text with
// whatever it accepted.
#include "core/error.h"
#include "fuzz_input.h"
#include "io/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses;
  const std::string path = fuzz::write_input("tokenizer.json", data, size);
  try {
    const auto tok = load_hf_tokenizer(path);
    const std::string text = "Hello, world! 123 \xc3\xa9t\xc3\xa9 <|end_of_text|>\n\tmore  text";
    const std::vector<int32_t> ids = tok->encode(text, true);
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    tok->decode(ids, false);
    tok->decode(ids, true);
  } catch (const Error&) {
  }
  return 0;
}
