// File: core/status_macros.h
//
// TC_RETURN_IF_ERROR and TC_ASSIGN_OR_RETURN: early-return helpers for absl::Status and
// absl::StatusOr<T>. Debian 12's Abseil (20220623) ships neither ABSL_RETURN_IF_ERROR nor
// ABSL_ASSIGN_OR_RETURN, so they are defined once here and used everywhere.

#ifndef TENSORCOMPUTE_CORE_STATUS_MACROS_H_
#define TENSORCOMPUTE_CORE_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define TC_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    ::absl::Status tc_status_macro_status_ = (expr); \
    if (!tc_status_macro_status_.ok()) {             \
      return tc_status_macro_status_;                \
    }                                                \
  } while (false)

// Evaluates `rexpr` (an absl::StatusOr<T>); returns its status if not OK, otherwise moves
// the value into `lhs`, which may be a declaration (`auto x`) or an existing variable.
#define TC_ASSIGN_OR_RETURN(lhs, rexpr) \
  TC_ASSIGN_OR_RETURN_IMPL_(TC_STATUS_MACROS_CONCAT_(tc_statusor_, __LINE__), lhs, rexpr)

// ---- implementation details ----
#define TC_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define TC_STATUS_MACROS_CONCAT_(x, y) TC_STATUS_MACROS_CONCAT_INNER_(x, y)
#define TC_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) {                                 \
    return std::move(statusor).status();                \
  }                                                     \
  lhs = *std::move(statusor)

#endif  // TENSORCOMPUTE_CORE_STATUS_MACROS_H_
