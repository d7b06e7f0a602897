// libFuzzer target: the token-shard reader (header, counts, offsets, document index,
// every token against the vocabulary) and lookups on whatever it accepts.
#include "core/error.h"
#include "fuzz_input.h"
#include "io/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ulysses;
  const std::string path = fuzz::write_input("input.tokens", data, size);
  try {
    const TokenShard s = TokenShard::open(path, /*check_tokens=*/true);
    for (int64_t t = 0; t < s.num_tokens(); t += 1 + s.num_tokens() / 16) {
      const int64_t d = s.document_of(t);
      if (d < 0 || (s.num_documents() > 0 && d >= s.num_documents())) std::abort();
      if (s.tokens()[t] >= s.vocab_size()) std::abort();
    }
  } catch (const Error&) {
  }
  return 0;
}
