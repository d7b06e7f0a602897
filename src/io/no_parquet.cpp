// The Parquet reader of a build without the Arrow/Parquet C++ libraries: refuses.
#include "core/error.h"
#include "io/parquet_rows.h"

namespace ulysses {

struct ParquetRows::Impl {};

bool parquet_supported() { return false; }

ParquetRows::ParquetRows(const std::string& path, const std::vector<std::string>&) {
  ULY_FAIL(path << ": a Parquet file, and this build of ulysses has no Parquet reader: run "
                   "scripts/fetch-pyarrow.sh (it fetches the Arrow/Parquet C++ libraries from the pyarrow wheel on "
                   "PyPI) and build again (make), or convert the file to JSON Lines");
}

ParquetRows::~ParquetRows() = default;
bool ParquetRows::next(nlohmann::ordered_json&) { return false; }
int64_t ParquetRows::row_number() const { return 0; }
uint64_t ParquetRows::file_bytes_read() const { return 0; }

}  // namespace ulysses
