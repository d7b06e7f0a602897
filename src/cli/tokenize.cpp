// ulysses tokenize --tokenizer tokenizer.json|byte [--add-special-tokens]
//   text on stdin -> token ids as one JSON array on stdout.
// ulysses tokenize --tokenizer ... --decode [--skip-special-tokens]
//   a JSON array of ids on stdin -> the text on stdout.
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/json_depth.h"
#include "core/error.h"
#include "core/limits.h"
#include "io/tokenizer.h"

namespace ulysses {

int run_tokenize(int argc, char** argv) {
  const std::vector<OptionSpec> specs = {
      {"tokenizer", true, false, "tokenizer.json (or its folder), or 'byte' (default)"},
      {"add-special-tokens", false, false, "apply the post-processor (Llama 3: a leading <|begin_of_text|>)"},
      {"decode", false, false, "read a JSON array of ids and write the text"},
      {"skip-special-tokens", false, false, "with --decode: leave special tokens out"},
      {"help", false, false, "show this help"},
  };
  Args args("tokenize", specs, argc, argv, 2);
  if (args.has("help")) {
    std::cout << Args::usage("tokenize", specs) << "\nReads stdin, writes stdout.\n";
    return 0;
  }
  const auto tok = open_tokenizer(args.get("tokenizer", "byte"));
  // stdin may be endless (a device, a pipe from yes): read it within a stated limit.
  std::string input;
  char buf[1 << 16];
  while (std::cin.read(buf, sizeof buf) || std::cin.gcount() > 0) {
    input.append(buf, static_cast<size_t>(std::cin.gcount()));
    ULY_CHECK(input.size() <= limits::kMaxTokenizeBytes,
              "tokenize: stdin holds more than " << (limits::kMaxTokenizeBytes >> 20)
                                                 << " MiB; tokenize a corpus with `ulysses prepare` (it streams)");
  }

  if (args.has("decode")) {
    nlohmann::json j;
    check_json_depth(input, "tokenize --decode: stdin");
    try {
      j = nlohmann::json::parse(input);
    } catch (const nlohmann::json::exception& e) {
      ULY_FAIL("tokenize --decode: stdin is not a JSON array of ids (" << e.what() << ")");
    }
    ULY_CHECK(j.is_array(), "tokenize --decode: stdin must be a JSON array of ids");
    std::vector<int32_t> ids;
    for (const auto& v : j) {
      ULY_CHECK(v.is_number_integer(), "tokenize --decode: " << v.dump() << " is not an integer id");
      // An id past int64 parses as uint64: range-check the unsigned value before any cast.
      const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(limits::kTokenId.hi);
      ULY_CHECK(!too_big, "tokenize --decode: id " << v.dump() << " must be in " << describe_range(limits::kTokenId)
                                                    << " (" << limits::kTokenId.note << ")");
      ids.push_back(static_cast<int32_t>(check_in_range("tokenize --decode: id", v.get<int64_t>(), limits::kTokenId)));
    }
    std::cout << tok->decode(ids, args.has("skip-special-tokens"));
    std::cout.flush();
    return 0;
  }

  const std::vector<int32_t> ids = tok->encode(input, args.has("add-special-tokens"));
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::cout << out;
  std::cout.flush();
  return 0;
}

}  // namespace ulysses
