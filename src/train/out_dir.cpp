#include "train/out_dir.h"

#include <filesystem>
#include <system_error>

#include "core/error.h"

namespace ulysses {
namespace fs = std::filesystem;

namespace {

const char* kind_of(fs::file_type t) {
  switch (t) {
    case fs::file_type::regular: return "a regular file";
    case fs::file_type::block: return "a block device";
    case fs::file_type::character: return "a character device";
    case fs::file_type::fifo: return "a FIFO";
    case fs::file_type::socket: return "a socket";
    default: return "not a folder";
  }
}

}  // namespace

bool is_run_folder(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  return fs::exists(d / "run.lock", ec) || fs::exists(d / "metrics.jsonl", ec) || fs::is_directory(d / "checkpoints", ec);
}

void prepare_out_dir(const std::string& out_dir) {
  ULY_CHECK(!out_dir.empty(), "train: out_dir is empty; give the folder for the run's metrics and checkpoints");
  const fs::path dir(out_dir);
  std::error_code ec;
  const fs::file_status link = fs::symlink_status(dir, ec);
  if (fs::is_symlink(link)) {
    std::error_code ec2;
    const fs::file_status target = fs::status(dir, ec2);
    ULY_CHECK(fs::exists(target), "train: out_dir " << out_dir << " is a dangling symlink (to "
                                                  << fs::read_symlink(dir, ec2).string()
                                                  << "); point it at a folder or choose another out_dir");
  }
  const fs::file_status st = fs::status(dir, ec);
  if (!fs::exists(st)) {
    std::error_code mk;
    fs::create_directories(dir, mk);
    ULY_CHECK(!mk, "train: cannot make out_dir " << out_dir << ": " << mk.message());
    return;
  }
  ULY_CHECK(fs::is_directory(st), "train: out_dir " << out_dir << " is " << kind_of(st.type())
                                                    << ", not a folder; choose another out_dir");
  std::error_code it_ec;
  fs::directory_iterator it(dir, it_ec);
  ULY_CHECK(!it_ec, "train: cannot read out_dir " << out_dir << ": " << it_ec.message());
  if (it == fs::directory_iterator() || is_run_folder(out_dir)) return;
  ULY_FAIL("train: out_dir " << out_dir << " is a folder that holds other files (e.g. '"
                             << it->path().filename().string()
                             << "') and no run of ours (no run.lock, metrics.jsonl or checkpoints/); choose a new "
                                "or empty folder");
}

}  // namespace ulysses
