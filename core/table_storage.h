// File: core/table_storage.h
//
// How a resident table may be stored (issue 24): as sent, or compact, a float32 [rows, dim]
// table held in fewer bytes and still gathered and pooled as float32.
//
//   kAsIs                     as sent: any dtype and shape.
//   kFloat16                  a float32 table stored as IEEE float16, each element rounded to
//                             nearest even; a finite value that float16 cannot hold (|x| >=
//                             65520, which would round to infinity) is INVALID_ARGUMENT naming
//                             the first such element. Infinities and NaNs stay what they are.
//   kInt8Rowwise              a float32 table quantized by the server row by row into FBGEMM's
//                             fused 8-bit row-wise layout (core/compact_row.h), in float32:
//                               bias = min(row), scale = (max(row) - min(row)) / 255,
//                               code = lrintf((x - bias) * (255 / (max - min + 1e-8f))),
//                             held in [0, 255]. A row holding a NaN or an infinity, or whose
//                             max - min overflows float32, is INVALID_ARGUMENT (its codes would
//                             mean nothing).
//   kInt8RowwisePrequantized  uint8 [rows, dim + 8] already in that layout (e.g. made offline
//                             by FBGEMM or TorchRec); stored as sent. A row whose scale or bias
//                             is not finite is INVALID_ARGUMENT (CheckStoredRows): its values
//                             would be NaNs whose bits differ between a CPU and a GPU.
//
// A compact table's logical dtype and shape are float32 [rows, dim] (what a lookup returns);
// its stored tensor is float16 [rows, dim] or uint8 [rows, dim + 8], which is what it costs
// against max_resident_bytes.
//
// Thread-safety: pure functions; a TableEncoder is used by one thread at a time.

#ifndef TENSORCOMPUTE_CORE_TABLE_STORAGE_H_
#define TENSORCOMPUTE_CORE_TABLE_STORAGE_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

#include "core/compact_row.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"

namespace tensorcompute::core {

// The numbers are part of the API (the wire's TableStorage uses them).
enum class TableStorage : int32_t {
  kAsIs = 0,
  kFloat16 = 1,
  kInt8Rowwise = 2,
  kInt8RowwisePrequantized = 3,
};

// "AS_IS", "FLOAT16", "INT8_ROWWISE", "INT8_ROWWISE_PREQUANTIZED"; "storage(<n>)" otherwise.
std::string TableStorageName(TableStorage storage);

// The kind as the CLI, --preload and the Python client spell it: TableStorageName in lower
// case with dashes ("int8-rowwise").
std::string TableStorageFlagName(TableStorage storage);

// Parses a kind as the CLI and --preload spell it: "as-is", "float16", "int8-rowwise",
// "int8-rowwise-prequantized" (or TableStorageName's spelling, any case). nullopt otherwise.
std::optional<TableStorage> ParseTableStorage(absl::string_view text);

// The kinds' CLI spellings, for help texts and errors: "as-is, float16, ...".
std::string TableStorageChoices();

// What the kernels read for a table stored as `storage` (core/compact_row.h).
TableEncoding EncodingOf(TableStorage storage);

// How a table described by its upload (dtype and shape as the client sends them) is stored.
struct TableLayout {
  TableStorage storage = TableStorage::kAsIs;
  DataType sent_dtype = DataType::kUnspecified;  // what the upload's bytes are
  DataType stored_dtype = DataType::kUnspecified;
  Shape stored_shape;
  DataType logical_dtype = DataType::kUnspecified;  // what lookups return
  Shape logical_shape;
  int64_t sent_bytes = 0;    // the upload's data bytes (0 for DT_STRING)
  int64_t stored_bytes = 0;  // the stored tensor's data bytes (0 for DT_STRING)
  bool encodes() const {     // the server converts the bytes sent (kFloat16, kInt8Rowwise)
    return storage == TableStorage::kFloat16 || storage == TableStorage::kInt8Rowwise;
  }
};

// Checks that a description fits `storage` and returns its layout. `dtype` and `shape` must
// already be a valid resident description (ValidateResidentDescription). INVALID_ARGUMENT:
//   a storage outside the enum: "tensor 'NAME': unknown storage 9; expected AS_IS (0), ...";
//   kFloat16 / kInt8Rowwise: a dtype other than float32 or a rank other than 2
//     ("tensor 'NAME': INT8_ROWWISE storage takes a float32 table [rows, dim], got int32 [4]");
//   kInt8Rowwise: dim 0 ("... needs at least one column");
//   kInt8RowwisePrequantized: not uint8 of rank 2 with at least 9 columns ("... takes uint8
//     [rows, dim + 8]: dim codes, then each row's float32 scale and bias, got ...").
absl::StatusOr<TableLayout> PlanTableLayout(absl::string_view name, TableStorage storage,
                                            DataType dtype, const Shape& shape);

// The logical dtype and shape of a stored tensor (the inverse of PlanTableLayout's mapping).
DataType LogicalDtype(TableStorage storage, DataType stored_dtype);
Shape LogicalShape(TableStorage storage, const Shape& stored_shape);

// Converts the float32 bytes of a table of layout.encodes() as they arrive, in pieces of any
// size and in order, into its stored form: a row is converted once its last byte has come
// (only one partial row is ever kept), so that the float32 table is never held whole.
class TableEncoder {
 public:
  // Where each stored row goes when it is not written in place: row `row`'s stored bytes
  // (StoredRowBytes), valid for the call only. An error stops the encoder and is returned.
  using RowSink = std::function<absl::Status(int64_t row, const uint8_t* stored)>;

  // `out` holds layout.stored_bytes and outlives the encoder. REQUIRES: layout.encodes().
  TableEncoder(std::string name, const TableLayout& layout, uint8_t* out);
  // Hands each stored row to `sink` in order instead (a table written to a file).
  TableEncoder(std::string name, const TableLayout& layout, RowSink sink);

  // The next bytes of the float32 table. INVALID_ARGUMENT for the first element or row that
  // the storage cannot hold (see the file comment), naming it; the encoder is then unusable.
  // REQUIRES: the bytes appended in all stay within layout.sent_bytes.
  absl::Status Append(absl::Span<const uint8_t> bytes);

 private:
  absl::Status EncodeRow(const float* row);

  const std::string name_;
  const TableStorage storage_;
  const int64_t dim_;
  const int64_t stored_row_bytes_;
  uint8_t* out_ = nullptr;
  RowSink sink_;                  // set when rows go to a sink, not to out_
  std::vector<uint8_t> scratch_;  // the row being encoded for the sink
  int64_t row_ = 0;               // rows encoded so far
  std::vector<uint8_t> partial_;  // bytes of the row being received
};

// Encodes one float32 row into `out` (StoredRowBytes). Used by TableEncoder and by tests;
// errors as TableEncoder::Append, naming row `row` of table `name`.
absl::Status EncodeFloat16Row(absl::string_view name, int64_t row, const float* values, int64_t dim,
                              uint8_t* out);
absl::Status EncodeRowwise8Row(absl::string_view name, int64_t row, const float* values,
                               int64_t dim, uint8_t* out);

// Checks the rows of a stored table as `storage` requires them: for kInt8RowwisePrequantized,
// a finite float32 scale and bias in every row; nothing for the other kinds (their conversion
// checked them). OK, or INVALID_ARGUMENT naming the first bad row: "tensor 'NAME': row 3 has
// scale nan and bias 0; INT8_ROWWISE_PREQUANTIZED rows need a finite scale and bias".
// `stored` may be some of the table's rows, from row `first_row` on (errors count from there).
// REQUIRES: `stored` has the stored dtype and row shape PlanTableLayout gave.
absl::Status CheckStoredRows(absl::string_view name, TableStorage storage, const TensorView& stored,
                             int64_t first_row = 0);

}  // namespace tensorcompute::core

#endif  // TENSORCOMPUTE_CORE_TABLE_STORAGE_H_
