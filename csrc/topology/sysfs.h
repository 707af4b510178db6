// Reading a sysfs tree under a root that is a parameter ("/sys" on a host; a fake tree in tests). Every
// read may fail (a file missing, unreadable, a link broken): each returns nothing then, never throws.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kvs::topology {

class SysfsTree {
 public:
  explicit SysfsTree(std::string root);

  const std::string& root() const { return root_; }
  // The file's first line without trailing whitespace; nothing when it cannot be read.
  std::optional<std::string> read(const std::string& rel) const;
  // The names in a directory, sorted; empty when it cannot be listed.
  std::vector<std::string> list(const std::string& rel) const;
  bool exists(const std::string& rel) const;
  bool is_link(const std::string& rel) const;
  // Where `rel` leads once every link is followed, relative to the root ("devices/pci0000:00/..."); nothing
  // when a link is broken or leads outside the root.
  std::optional<std::string> resolve(const std::string& rel) const;

 private:
  std::string root_;
  std::string canonical_root_;
};

// "0000:3b:00.0": a PCI function's address (domain:bus:device.function, lower-case hex).
bool is_pci_address(const std::string& name);
// The PCI addresses along a resolved device path, the root port first.
std::vector<std::string> pci_chain(const std::string& resolved);
// "0-3,8-11" -> its CPUs; nothing when the list is malformed.
std::optional<std::vector<int>> parse_cpu_list(const std::string& text);

}  // namespace kvs::topology
