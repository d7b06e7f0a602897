// Rows of a Parquet file for `ulysses prepare`, one row group in memory at a time,
// each row given as a JSON object of the wanted columns (strings, numbers, booleans,
// lists and structs, so a `messages` column of {role, content} structs reads as the
// JSON Lines record would). Read with the Arrow/Parquet C++ libraries of the pyarrow
// wheel (scripts/fetch-pyarrow.sh); a build without them has src/io/no_parquet.cpp,
// which refuses Parquet input saying how to get the reader.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ulysses {

// True when this build reads Parquet.
bool parquet_supported();

class ParquetRows {
 public:
  // Opens PATH; of `wanted` (top-level column names), those the file has are read;
  // none at all is an error naming the file's columns.
  ParquetRows(const std::string& path, const std::vector<std::string>& wanted);
  ~ParquetRows();
  ParquetRows(const ParquetRows&) = delete;
  ParquetRows& operator=(const ParquetRows&) = delete;

  // The next row as {column: value}; false at the end.
  bool next(nlohmann::ordered_json& row);
  int64_t row_number() const;      // 1-based, of the row last returned
  uint64_t file_bytes_read() const;  // compressed bytes of the row groups read so far (for progress)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ulysses
