// Writing output files whole or not at all (see files.h).
#include "support/files.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <unistd.h>
#include <filesystem>
#include <fstream>

#include "support/error.h"

namespace mutwo {

void write_file(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  MUTWO_CHECK(f, "cannot write {}: {} (check that its folder exists and is writable)", path, std::strerror(errno));
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
  const int err = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) {
    std::remove(tmp.c_str());
    MUTWO_FAIL("writing {} failed: {} (disk full?); nothing was written", path, std::strerror(err ? err : errno));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    MUTWO_FAIL("cannot write {}: {}", path, ec.message());
  }
}

std::string read_file(const std::string& path, int64_t limit) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  MUTWO_CHECK(!ec && std::filesystem::exists(status), "cannot open {}: no such file; check the path", path);
  MUTWO_CHECK(std::filesystem::is_regular_file(status), "{} is not a regular file (a folder or a device?)", path);
  const auto size = std::filesystem::file_size(path, ec);
  MUTWO_CHECK(!ec && static_cast<int64_t>(size) <= limit, "{} is {} bytes, more than the {} this reader accepts", path,
              ec ? 0 : size, limit);
  std::ifstream in(path, std::ios::binary);
  MUTWO_CHECK(in, "cannot open {}: {}", path, std::strerror(errno));
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  MUTWO_CHECK(in.gcount() == static_cast<std::streamsize>(size), "reading {} failed", path);
  return text;
}

void check_writable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  MUTWO_CHECK(!fs::is_directory(path, ec), "cannot write {}: it is a folder; give a file's path", path);
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  MUTWO_CHECK(fs::is_directory(parent, ec), "cannot write {}: {}; make that folder first or choose another path", path,
              fs::exists(parent, ec) ? parent.string() + " is not a folder" : "the folder " + parent.string() + " does not exist");
  MUTWO_CHECK(::access(parent.c_str(), W_OK) == 0, "cannot write {}: the folder {} is not writable ({}); choose another "
              "path", path, parent.string(), std::strerror(errno));
}

void make_dirs(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MUTWO_CHECK(!ec && std::filesystem::is_directory(dir), "cannot make the folder {}: {}", dir,
              ec ? ec.message() : "a file of that name is in the way");
}

}  // namespace mutwo
