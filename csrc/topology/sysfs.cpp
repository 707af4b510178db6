#include "topology/sysfs.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace fs = std::filesystem;

namespace kvs::topology {

SysfsTree::SysfsTree(std::string root) : root_(std::move(root)) {
  std::error_code ec;
  const fs::path canonical = fs::canonical(root_, ec);
  canonical_root_ = ec ? root_ : canonical.string();
}

std::optional<std::string> SysfsTree::read(const std::string& rel) const {
  std::ifstream in(fs::path(root_) / rel);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;  // (sysfs answers EINVAL for a down link's speed)
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

std::vector<std::string> SysfsTree::list(const std::string& rel) const {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(root_) / rel, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool SysfsTree::exists(const std::string& rel) const {
  std::error_code ec;
  return fs::exists(fs::path(root_) / rel, ec);
}

bool SysfsTree::is_link(const std::string& rel) const {
  std::error_code ec;
  return fs::is_symlink(fs::symlink_status(fs::path(root_) / rel, ec));
}

std::optional<std::string> SysfsTree::resolve(const std::string& rel) const {
  std::error_code ec;
  const fs::path target = fs::canonical(fs::path(root_) / rel, ec);
  if (ec) return std::nullopt;
  const std::string text = target.string();
  if (text.size() <= canonical_root_.size() ||
      text.compare(0, canonical_root_.size(), canonical_root_) != 0 || text[canonical_root_.size()] != '/') {
    return std::nullopt;
  }
  return text.substr(canonical_root_.size() + 1);
}

bool is_pci_address(const std::string& name) {
  // dddd:bb:dd.f
  if (name.size() != 12 || name[4] != ':' || name[7] != ':' || name[10] != '.') return false;
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9}) {
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  }
  return name[11] >= '0' && name[11] <= '7';
}

std::vector<std::string> pci_chain(const std::string& resolved) {
  std::vector<std::string> chain;
  for (const auto& part : fs::path(resolved)) {
    if (is_pci_address(part.string())) chain.push_back(part.string());
  }
  return chain;
}

std::optional<std::vector<int>> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  size_t at = 0;
  auto number = [&text, &at]() -> std::optional<int> {
    size_t start = at;
    long value = 0;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])) && at - start < 7) {
      value = value * 10 + (text[at++] - '0');
    }
    if (at == start) return std::nullopt;
    return static_cast<int>(value);
  };
  while (at < text.size()) {
    const auto low = number();
    if (!low) return std::nullopt;
    int high = *low;
    if (at < text.size() && text[at] == '-') {
      ++at;
      const auto end = number();
      if (!end || *end < *low || *end - *low > 65536) return std::nullopt;
      high = *end;
    }
    for (int cpu = *low; cpu <= high; ++cpu) cpus.push_back(cpu);
    if (at < text.size()) {
      if (text[at] != ',') return std::nullopt;
      ++at;
    }
  }
  return cpus;
}

}  // namespace kvs::topology
