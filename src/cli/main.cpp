// ulysses <command> [options]: the command-line entry point. Thin: parses the
// command, sets up the world communicator, and turns any error into one clear
// line and a non-zero exit on every rank (aborting the others, never hanging).
#include <cstring>
#include <filesystem>
#include <iostream>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/nearest.h"
#include "core/log.h"

namespace {

struct CommandInfo {
  const char* name;
  const char* summary;
};

// The commands, as the usage lists them and as a mistyped one is matched against.
const CommandInfo kCommands[] = {
    {"loss-grad", "loss and gradients of one batch (check the engine against PyTorch)"},
    {"prepare", "text / JSON Lines -> token shards for training"},
    {"tokenize", "text on stdin -> token ids (JSON) on stdout"},
    {"train", "train a model (ulysses train CONFIG.yaml; --help lists every key)"},
    {"plot", "a loss-curve PNG from a run's metrics.jsonl"},
    {"generate", "text from a model folder or checkpoint (greedy or sampled, KV cache)"},
    {"bench", "time training steps (step time, tokens/s, TFLOPS, MFU, memory)"},
    {"merge-lora", "a model folder with a PEFT LoRA adapter merged into its weights"},
    {"plan", "the exact memory plan of a training step, per pool, without running it"},
    {"comm-bench", "the step's collectives alone: time, algorithm and bus bandwidth per size"},
    {"version", "the version of this build (also --version)"},
};

std::string usage() {
  std::string s = "usage: ulysses <command> [options]\n\ncommands:\n";
  for (const CommandInfo& c : kCommands)
    s += "  " + std::string(c.name) + std::string(12 - std::strlen(c.name), ' ') + c.summary + "\n";
  return s +
         "\n"
         "Run 'ulysses <command> --help' for a command's options. Launch several ranks with\n"
         "mpirun -np P (see docs/launching.md).\n";
}

// ULYSSES_VERSION and ULYSSES_GIT_COMMIT are set by CMake (the project's VERSION, git at configure time).
std::string version_line() {
  const std::string commit = ULYSSES_GIT_COMMIT;
  return std::string("ulysses ") + ULYSSES_VERSION + (commit.empty() ? "" : " (commit " + commit + ")");
}

// "unknown command 'trian' (did you mean 'train'?)": a suggestion only when it is a plausible typo.
std::string unknown_command(const std::string& command) {
  std::vector<std::string> names;
  for (const CommandInfo& c : kCommands) names.push_back(c.name);
  const std::string guess = ulysses::nearest(command, names);
  const bool plausible = ulysses::edit_distance(command, guess) <= 2 ||
                         (command.size() >= 2 && guess.rfind(command, 0) == 0);
  const std::string shown = command.size() <= 64 ? command : command.substr(0, 60) + "...";  // a 5,000-byte word
  return "unknown command '" + shown + "'" + (plausible ? " (did you mean '" + guess + "'?)" : "") +
         "; 'ulysses --help' lists the commands";
}

// The message of a refusal without the prefixes main adds itself: library and command code
// often name the command ("generate: ...") or wrap another message ("error: ..."), and the line
// must carry "ulysses <command>: error: " once. Strips any run of "ulysses <command>: ",
// "ulysses: ", "<command>: " and "error: " at the start.
std::string without_repeated_prefix(const std::string& command, std::string message) {
  const std::string prefixes[] = {"ulysses " + command + ": ", "ulysses: ", command + ": ", "error: "};
  for (bool stripped = true; stripped;) {
    stripped = false;
    for (const std::string& p : prefixes)
      if (message.size() > p.size() && message.compare(0, p.size(), p) == 0) {
        message.erase(0, p.size());
        stripped = true;
      }
  }
  return message;
}

// A message quoting an input at length (a 2 MB model_type) stays a line a person can read: past
// kMaxMessageBytes its middle is left out, cut at UTF-8 character starts.
std::string bounded(std::string message) {
  constexpr size_t kMaxMessageBytes = 2000, kHead = 1400, kTail = 400;
  if (message.size() <= kMaxMessageBytes) return message;
  auto start_of_char = [&](size_t i) {
    while (i > 0 && (static_cast<unsigned char>(message[i]) & 0xC0) == 0x80) --i;
    return i;
  };
  const size_t head = start_of_char(kHead), tail = start_of_char(message.size() - kTail);
  return message.substr(0, head) + " ... (" + std::to_string(tail - head) + " bytes left out) ... " +
         message.substr(tail);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ulysses;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::cout << usage();
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "--version" || command == "version") {
    std::cout << version_line() << "\n";
    return 0;
  }
  bool known = false;
  for (const CommandInfo& c : kCommands) known = known || command == c.name;
  if (!known) {  // before any launcher check or MPI start-up: a typo is answered at once
    std::cerr << "ulysses: error: " << unknown_command(command) << "\n";
    return 2;
  }
  std::unique_ptr<Communicator> world;
  try {
    world = make_world_communicator(&argc, &argv);
    int code = 2;
    if (command == "loss-grad") {
      code = run_loss_grad(argc, argv, *world);
    } else if (command == "train") {
      code = run_train(argc, argv, *world);
    } else if (command == "prepare") {
      code = run_prepare(argc, argv);
    } else if (command == "tokenize") {
      code = run_tokenize(argc, argv);
    } else if (command == "generate") {
      code = run_generate(argc, argv);
    } else if (command == "plot") {
      code = run_plot(argc, argv);
    } else if (command == "bench") {
      code = run_bench(argc, argv, *world);
    } else if (command == "comm-bench") {
      code = run_comm_bench(argc, argv, *world);
    } else if (command == "merge-lora") {
      code = run_merge_lora(argc, argv);
    } else if (command == "plan") {
      code = run_plan(argc, argv);
    }
    world.reset();
    finalize_world_communicator();
    return code;
  } catch (const Error& e) {
    std::ostringstream line;  // one write per message: ranks sharing a terminal do not interleave mid-line
    line << "ulysses " << command << ": error: " << bounded(without_repeated_prefix(command, e.message()));
    if (process_world_size() > 1) line << " (rank " << process_rank() << ")";
    line << '\n';
    std::cerr << line.str() << std::flush;
    if (world && world->size() > 1) world->abort(1);
    return 1;
  } catch (const std::bad_alloc&) {
    // Sizes are checked against stated limits and plans before allocating; this is what is left.
    std::cerr << ("ulysses " + command + ": error: out of host memory (an allocation failed); the inputs or "
                  "options ask for more memory than this host has\n") << std::flush;
    if (world && world->size() > 1) world->abort(1);
    return 1;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the checks before did not foresee (a parent that is a file, a folder without
    // permission): still one line naming the path, not an internal error.
    std::ostringstream line;
    line << "ulysses " << command << ": error: " << (e.path1().empty() ? std::string("a path") : e.path1().string())
         << ": " << e.code().message() << '\n';
    std::cerr << line.str() << std::flush;
    if (world && world->size() > 1) world->abort(1);
    return 1;
  } catch (const std::exception& e) {
    std::cerr << ("ulysses " + command + ": internal error: " + e.what() + "\n") << std::flush;
    if (world && world->size() > 1) world->abort(1);
    return 1;
  }
}
