#include "data/prepare.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/corpus.h"
#include "data/permutation.h"
#include "io/atomic_file.h"
#include "io/token_shard.h"
#include "data/sft.h"
#include "io/tokenizer.h"

namespace ulysses {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kBatchDocs = 8192;  // documents tokenized in parallel at a time (at most)

// One split's shards: a new shard starts when the next document would cross the limit.
class SplitWriter {
 public:
  SplitWriter(std::string prefix, const PrepareOptions& o, const Tokenizer& tok)
      : prefix_(std::move(prefix)), o_(o), tok_(tok) {}

  // A document in pieces: begin (n: the first piece's tokens, for the shard cut), append..., end.
  void begin(int64_t n) {
    if (!writer_ || (writer_->num_tokens() > 0 && writer_->num_tokens() + n > o_.shard_tokens)) {
      finish();
      char name[64];
      std::snprintf(name, sizeof name, "%s-%05zu.tokens", prefix_.c_str(), split_.files.size());
      split_.files.push_back(name);
      writer_ = std::make_unique<TokenShardWriter>((fs::path(o_.out_dir) / name).string(), tok_.vocab_size(),
                                                   tok_.name());
    }
  }
  void append(const std::vector<int32_t>& ids, const std::vector<uint8_t>* mask) {
    writer_->append(ids.data(), ids.size(), mask && !mask->empty() ? mask->data() : nullptr);
    split_.tokens += static_cast<int64_t>(ids.size());
  }
  void end() {
    writer_->end_document();
    split_.documents += 1;
  }

  void finish() {
    if (writer_) writer_->finish();
    writer_.reset();
  }

  const PreparedSplit& split() const { return split_; }

 private:
  std::string prefix_;
  const PrepareOptions& o_;
  const Tokenizer& tok_;
  std::unique_ptr<TokenShardWriter> writer_;
  PreparedSplit split_;
};

class Progress {
 public:
  Progress(double interval, uint64_t total_bytes) : total_(total_bytes), start_(Clock::now()), last_(start_) {
    tty_ = isatty(STDERR_FILENO) != 0;
    interval_ = interval >= 0 ? interval : (tty_ ? 0.25 : 5.0);
  }

  void update(uint64_t bytes, int64_t tokens, int64_t docs, bool final) {
    if (interval_ == 0) return;
    const auto now = Clock::now();
    if (!final && std::chrono::duration<double>(now - last_).count() < interval_) return;
    last_ = now;
    const double s = std::max(1e-9, std::chrono::duration<double>(now - start_).count());
    std::fprintf(stderr, "%sprepare: %.1f/%.1f MB (%.0f%%), %.1f MB/s, %lld tokens (%.2fM tok/s), %lld documents%s",
                 tty_ ? "\r" : "", bytes / 1e6, total_ / 1e6, total_ ? 100.0 * bytes / total_ : 100.0,
                 bytes / 1e6 / s, static_cast<long long>(tokens), tokens / 1e6 / s, static_cast<long long>(docs),
                 tty_ && !final ? "   " : "\n");
    std::fflush(stderr);
  }

 private:
  uint64_t total_;
  Clock::time_point start_, last_;
  bool tty_;
  double interval_;
};

// Makes out_dir ready: refuses to mix with an earlier run's files unless forced.
void prepare_out_dir(const PrepareOptions& o) {
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  ULY_CHECK(fs::is_directory(o.out_dir, ec), o.out_dir << ": cannot create the output folder (" << ec.message() << ")");
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(o.out_dir))
    if (e.path().filename() == "manifest.json" || e.path().extension() == ".tokens") old.push_back(e.path());
  if (old.empty()) return;
  std::sort(old.begin(), old.end());
  ULY_CHECK(o.force, o.out_dir << ": already holds prepared data (" << old.front().filename().string()
                               << "); choose another --out or pass --force to replace it");
  for (const fs::path& p : old) fs::remove(p);
}

void write_manifest(const PrepareOptions& o, const Tokenizer& tok, const std::optional<int32_t>& eos,
                    const std::vector<CorpusFile>& files, const PrepareResult& r) {
  using nlohmann::json;
  auto split_json = [&](const PreparedSplit& s) {
    json list = json::array();
    for (const std::string& f : s.files) {
      const TokenShard shard = TokenShard::open((fs::path(o.out_dir) / f).string(), false);
      list.push_back({{"file", f}, {"tokens", shard.num_tokens()}, {"documents", shard.num_documents()}});
    }
    return list;
  };
  auto opt = [](const std::optional<int32_t>& v) { return v ? json(*v) : json(nullptr); };
  json inputs = json::array();
  for (const CorpusFile& f : files) inputs.push_back(f.path);
  json m = {
      {"format", "ulysses-token-shards"},
      {"version", 1},
      {"tokenizer",
       {{"spec", o.tokenizer}, {"name", tok.name()}, {"vocab_size", tok.vocab_size()}, {"bos_id", opt(tok.bos_id())},
        {"eos_id", opt(tok.eos_id())}}},
      {"eos_appended", o.append_eos ? opt(eos) : json(nullptr)},
      {"add_special_tokens", o.add_special_tokens},
      {"seed", o.seed},
      {"val_fraction", o.val_fraction},
      {"shard_tokens", o.shard_tokens},
      {"inputs", inputs},
      {"bytes", r.bytes},
      {"documents", {{"train", r.train.documents}, {"val", r.val.documents}, {"skipped_empty", r.skipped_empty},
                     {"sft", r.sft_documents}}},
      {"tokens", {{"train", r.train.tokens}, {"val", r.val.tokens}}},
      {"train", split_json(r.train)},
      {"val", split_json(r.val)},
  };
  if (!o.chat_template_kwargs.empty()) m["chat_template_kwargs"] = json::parse(o.chat_template_kwargs);
  write_file_atomic((fs::path(o.out_dir) / "manifest.json").string(), m.dump(2) + "\n");
}

}  // namespace

PrepareResult prepare_corpus(const PrepareOptions& o) {
  ULY_CHECK(!o.inputs.empty(), "prepare: no inputs; give --input FILE|DIR (repeatable or comma-separated)");
  ULY_CHECK(!o.out_dir.empty(), "prepare: missing --out DIR");
  ULY_CHECK(o.val_fraction >= 0.0 && o.val_fraction < 1.0,
            "prepare: --val-fraction must be in [0, 1), got " << o.val_fraction);
  ULY_CHECK(o.shard_tokens > 0, "prepare: --shard-tokens must be positive, got " << o.shard_tokens);

  const std::unique_ptr<Tokenizer> tok = open_tokenizer(o.tokenizer);
  std::optional<int32_t> eos;
  if (o.append_eos) {
    eos = o.eos_token.empty() ? tok->eos_id() : tok->token_id(o.eos_token);
    ULY_CHECK(eos.has_value(), "prepare: tokenizer '" << o.tokenizer << "' has "
                                   << (o.eos_token.empty() ? "no EOS token" : "no token '" + o.eos_token + "'")
                                   << "; name one with --eos-token or pass --no-eos");
  }
  const std::vector<CorpusFile> files = list_corpus_files(o.inputs);
  uint64_t total_bytes = 0;
  for (const CorpusFile& f : files) total_bytes += f.bytes;
  ULY_CHECK(!files.empty(), "prepare: the inputs hold no files");
  prepare_out_dir(o);

  const std::string template_path = !o.chat_template.empty() ? o.chat_template
                                    : o.tokenizer == "byte" || o.tokenizer.empty() ? std::string() : o.tokenizer;
  const nlohmann::ordered_json template_kwargs =
      o.chat_template_kwargs.empty() ? nlohmann::ordered_json::object()
                                     : parse_chat_template_kwargs(o.chat_template_kwargs, "prepare: --chat-template-kwargs");
  SftEncoder sft(*tok, template_path, eos, template_kwargs);
  // The first refusal in a batch ends the run: no other document of the batch starts, and the
  // renders in flight stop (a runaway chat template is refused after one render's bound, not
  // after one per record: 10 s of CPU for each of thousands of records took minutes).
  std::atomic<bool> failed{false};
  sft.stop_renders_on(&failed);
  CorpusReader reader(files, o.text_key, o.chunk_bytes);
  SplitWriter train("train", o, *tok), val("val", o, *tok);
  // On failure, leave no shard of this run behind (a later run would refuse the folder).
  struct Cleanup {
    const PrepareOptions& o;
    SplitWriter &train, &val;
    bool armed = true;
    ~Cleanup() {
      if (!armed) return;
      std::error_code ec;
      for (const SplitWriter* s : {&train, &val})
        for (const std::string& f : s->split().files) fs::remove(fs::path(o.out_dir) / f, ec);
    }
  } cleanup{o, train, val};
  Progress progress(o.progress_interval_s, total_bytes);
  PrepareResult r;
  int64_t doc_number = 0;
  std::vector<CorpusDocument> docs;
  std::vector<SftDocument> encoded;
  const int threads = o.threads > 0 ? o.threads : omp_get_max_threads();
  SplitWriter* open_doc = nullptr;  // the split of the plain-text document being written in pieces
  for (;;) {
    docs.clear();
    size_t batch_bytes = 0;
    CorpusDocument d;
    while (batch_bytes < o.batch_bytes && docs.size() < kBatchDocs && reader.next(d)) {
      batch_bytes += d.text.size() + (d.sft ? 256 : 0);
      docs.push_back(std::move(d));
      d = CorpusDocument();
    }
    if (docs.empty()) break;
    encoded.assign(docs.size(), {});
    std::string error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t i = 0; i < static_cast<int64_t>(docs.size()); ++i) {
      if (failed.load(std::memory_order_relaxed)) continue;
      try {
        if (docs[i].sft) encoded[i] = sft.encode(docs[i].record, docs[i].where);
        else encoded[i].ids = tok->encode(docs[i].text, o.add_special_tokens && docs[i].first);
      } catch (const Error& e) {  // its message: what() also carries the source file and line
#pragma omp critical(prepare_error)
        {
          if (error.empty()) error = (docs[i].sft ? std::string() : docs[i].where + ": ") + e.message();
          failed = true;  // after the message: a render stopped by it finds `error` taken
        }
      } catch (const std::exception& e) {
#pragma omp critical(prepare_error)
        {
          if (error.empty()) error = (docs[i].sft ? std::string() : docs[i].where + ": ") + e.what();
          failed = true;
        }
      }
    }
    ULY_CHECK(error.empty(), "prepare: " << error);
    for (size_t i = 0; i < docs.size(); ++i) {
      const CorpusDocument& doc = docs[i];
      SftDocument& e = encoded[i];
      if (doc.first && doc.last && !doc.sft && doc.text.empty()) {
        ++r.skipped_empty;
        continue;
      }
      if (doc.first) {
        // A hash of (seed, document number), not a stream of random numbers: the split of a
        // document does not depend on how the corpus was batched.
        const uint64_t h = mix64(mix64(o.seed) ^ static_cast<uint64_t>(doc_number++));
        const bool held_out = static_cast<double>(h >> 11) * 0x1.0p-53 < o.val_fraction;
        open_doc = held_out ? &val : &train;
        open_doc->begin(static_cast<int64_t>(e.ids.size()) + (eos && doc.last && !doc.sft ? 1 : 0));
        if (doc.sft) ++r.sft_documents;
      }
      if (doc.last && eos && !doc.sft) {
        e.ids.push_back(*eos);
        if (!e.mask.empty()) e.mask.push_back(1);
      }
      open_doc->append(e.ids, doc.sft ? &e.mask : nullptr);
      if (doc.last) open_doc->end();
    }
    progress.update(reader.bytes_read(), train.split().tokens + val.split().tokens, doc_number, false);
  }
  train.finish();
  val.finish();
  r.train = train.split();
  r.val = val.split();
  r.bytes = reader.bytes_read();
  progress.update(r.bytes, r.train.tokens + r.val.tokens, doc_number, true);
  ULY_CHECK(doc_number > 0, "prepare: empty corpus: the inputs (" << files.size() << " file"
                                << (files.size() == 1 ? "" : "s") << ", " << total_bytes << " bytes) hold no non-empty document");
  ULY_CHECK(r.train.documents > 0, "prepare: all " << doc_number << " documents went to the validation split; "
                                                      "lower --val-fraction");
  write_manifest(o, *tok, eos, files, r);
  cleanup.armed = false;
  return r;
}

}  // namespace ulysses
