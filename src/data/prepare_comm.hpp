// prepare_data on an explicit communicator (tests compare 1 rank with N ranks in
// one job). Private to src/data and the data tests.
#pragma once
#include <mpi.h>

#include <string>
#include <string_view>

#include "llmtrain/data/prepare.hpp"

namespace llmtrain::data {

PrepareResult prepare_data_on(const PrepareOptions& options, MPI_Comm comm);

// Offset of the first ill-formed UTF-8 sequence of `s` (overlong forms,
// surrogates and code points above U+10FFFF are ill-formed), npos if none.
size_t utf8_first_invalid(std::string_view s);
// Why a document is not text ("binary (a NUL byte at offset 12)", "not UTF-8
// text (...)"), "" when it is. NUL bytes are never text: the byte tokenizer's
// end-of-document id is 0. UTF-8 is required only when `require_utf8`.
std::string not_text_reason(std::string_view text, bool require_utf8);

}  // namespace llmtrain::data
