// Python's pickle format, written: a JSON value (null, booleans, integers,
// floats, strings, arrays, objects) as the pickle of the equal Python value
// (None, bool, int, float, str, list, dict), for files that Python tools read
// with pickle.load (PyTorch's memory snapshot, report/snapshot.h).
//
// Protocol 2, with only the opcodes that PyTorch's memory viewer (its
// MemoryViz.js unpickler) also reads: PROTO, EMPTY_DICT, EMPTY_LIST, MARK,
// SETITEMS, APPENDS, BININT1, BININT2, BININT, LONG1, BINFLOAT, BINUNICODE,
// NONE, NEWTRUE, NEWFALSE, STOP. No memo: equal values are written again.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mutwo::report {

std::string to_pickle(const nlohmann::json& value);

}  // namespace mutwo::report
