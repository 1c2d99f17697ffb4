// Writing output files whole or not at all: the text goes to PATH.tmp, which
// is renamed to PATH only once every byte is written and flushed. A failed
// write (no such folder, disk full) is a UserError naming the file, and it
// leaves no PATH that looks finished (nor the .tmp).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace mutwo {

void write_file(const std::string& path, std::string_view bytes);

// The whole of a regular file of at most `limit` bytes: a UserError naming
// it when it is missing, not a regular file (a device such as /dev/zero, a
// folder) or larger than the limit.
std::string read_file(const std::string& path, int64_t limit = int64_t{1} << 30);

// Checks, before the work that ends in write_file(path), that the file can
// be written there: a UserError naming it when its folder is missing or not
// writable, or a folder is in its place. Writes nothing.
void check_writable(const std::string& path);

// Creates `dir` and its parents if missing; a UserError naming it when that
// is impossible (a file in the way, no permission).
void make_dirs(const std::string& dir);

// A stream collected in memory and written by write_file on commit():
//   OutFile f(path); f << "a,b\n"; ...; f.commit();
class OutFile : public std::ostringstream {
 public:
  explicit OutFile(std::string path) : path_(std::move(path)) {}
  void commit() { write_file(path_, str()); }

 private:
  std::string path_;
};

}  // namespace mutwo
