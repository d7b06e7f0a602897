// Parquet through Arrow's C++ reader: the row groups one by one (only the wanted
// columns), each column's values turned into JSON.
#include <arrow/api.h>
#include <arrow/io/file.h>
#include <parquet/arrow/reader.h>
#include <parquet/arrow/schema.h>
#include <parquet/exception.h>
#include <parquet/metadata.h>

#include "core/error.h"
#include "io/parquet_rows.h"
#include "io/regular_file.h"

namespace ulysses {

namespace {

// One value of a column as JSON (`where` names the file and column in errors).
nlohmann::ordered_json to_json(const arrow::Scalar& s, const std::string& where) {
  if (!s.is_valid) return nullptr;
  using T = arrow::Type;
  switch (s.type->id()) {
    case T::STRING:
    case T::LARGE_STRING:
    case T::STRING_VIEW:
      return static_cast<const arrow::BaseBinaryScalar&>(s).view();
    case T::BOOL:
      return static_cast<const arrow::BooleanScalar&>(s).value;
    case T::INT8: case T::INT16: case T::INT32: case T::INT64:
    case T::UINT8: case T::UINT16: case T::UINT32: case T::UINT64:
    case T::FLOAT: case T::DOUBLE:
      return nlohmann::ordered_json::parse(s.ToString());
    case T::LIST:
    case T::LARGE_LIST:
    case T::FIXED_SIZE_LIST:
    case T::LIST_VIEW:
    case T::LARGE_LIST_VIEW: {
      const auto& values = static_cast<const arrow::BaseListScalar&>(s).value;
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (int64_t i = 0; i < values->length(); ++i) out.push_back(to_json(*values->GetScalar(i).ValueOrDie(), where));
      return out;
    }
    case T::STRUCT: {
      const auto& st = static_cast<const arrow::StructScalar&>(s);
      const auto& type = static_cast<const arrow::StructType&>(*s.type);
      nlohmann::ordered_json out = nlohmann::ordered_json::object();
      for (int k = 0; k < type.num_fields(); ++k) out[type.field(k)->name()] = to_json(*st.value[k], where);
      return out;
    }
    default:
      ULY_FAIL(where << ": values of type " << s.type->ToString()
                     << " are not read; supported: strings, numbers, booleans, lists and structs of them");
  }
}

void collect_leaves(const parquet::arrow::SchemaField& f, std::vector<int>& out) {
  if (f.is_leaf()) out.push_back(f.column_index);
  for (const auto& c : f.children) collect_leaves(c, out);
}

template <class R>
auto checked(R result, const std::string& what) {
  ULY_CHECK(result.ok(), what << " (" << result.status().ToString() << ")");
  return std::move(result).ValueOrDie();
}

}  // namespace

struct ParquetRows::Impl {
  std::string path;
  std::unique_ptr<parquet::arrow::FileReader> reader;
  std::vector<int> leaves;              // the wanted columns' leaf indices
  std::vector<std::string> names;       // the wanted columns the file has, in file order
  int group = 0, groups = 0;
  std::shared_ptr<arrow::Table> table;  // the current row group
  int64_t row_in_group = 0, rows_before = 0;
  uint64_t bytes_done = 0;
};

bool parquet_supported() { return true; }

ParquetRows::ParquetRows(const std::string& path, const std::vector<std::string>& wanted)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  require_regular_file(path, "Parquet input");
  try {
    auto file = checked(arrow::io::ReadableFile::Open(path), path + ": cannot open");
    m.reader = checked(parquet::arrow::OpenFile(file, arrow::default_memory_pool()), path + ": not a valid Parquet file");
    const auto& fields = m.reader->manifest().schema_fields;
    std::vector<std::string> all;
    for (const auto& f : fields) {
      all.push_back(f.field->name());
      if (std::find(wanted.begin(), wanted.end(), f.field->name()) == wanted.end()) continue;
      m.names.push_back(f.field->name());
      collect_leaves(f, m.leaves);
    }
    std::string listed;
    for (const auto& n : all) listed += (listed.empty() ? "" : ", ") + n;
    std::string asked;
    for (const auto& n : wanted) asked += (asked.empty() ? "" : ", ") + n;
    ULY_CHECK(!m.names.empty(), path << ": no column named " << asked << " (the file has: " << listed
                                     << "); choose the text column with --text-column");
    m.groups = m.reader->num_row_groups();
  } catch (const parquet::ParquetException& e) {
    ULY_FAIL(path << ": not a valid Parquet file (" << e.what() << ")");
  }
}

ParquetRows::~ParquetRows() = default;

bool ParquetRows::next(nlohmann::ordered_json& row) {
  Impl& m = *impl_;
  try {
    while (!m.table || m.row_in_group >= m.table->num_rows()) {
      if (m.table) {
        m.rows_before += m.table->num_rows();
        m.bytes_done += static_cast<uint64_t>(m.reader->parquet_reader()->metadata()->RowGroup(m.group - 1)->total_compressed_size());
        m.table.reset();
      }
      if (m.group >= m.groups) return false;
      auto t = checked(m.reader->ReadRowGroup(m.group, m.leaves),
                       m.path + ": cannot read row group " + std::to_string(m.group));
      m.table = checked(t->CombineChunks(), m.path + ": cannot read row group " + std::to_string(m.group));
      ++m.group;
      m.row_in_group = 0;
    }
    row = nlohmann::ordered_json::object();
    for (int k = 0; k < m.table->num_columns(); ++k) {
      const auto& col = m.table->column(k);
      const std::string where = m.path + ": column " + m.table->field(k)->name();
      auto scalar = checked(col->GetScalar(m.row_in_group), where);
      row[m.table->field(k)->name()] = to_json(*scalar, where);
    }
    ++m.row_in_group;
    return true;
  } catch (const parquet::ParquetException& e) {
    ULY_FAIL(m.path << ": cannot read row group " << m.group - 1 << " (" << e.what() << ")");
  }
}

int64_t ParquetRows::row_number() const { return impl_->rows_before + impl_->row_in_group; }

uint64_t ParquetRows::file_bytes_read() const { return impl_->bytes_done; }

}  // namespace ulysses
