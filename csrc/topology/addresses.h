// The IP addresses of this host's network interfaces (getifaddrs: the live kernel, not a sysfs tree), and
// what an engine advertises of its NICs: each selected, usable NIC with each of its addresses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "topology/topology.h"

namespace kvs::topology {

struct InterfaceAddress {
  std::string interface;  // "eth0"
  std::string address;    // "10.0.0.2", "fd00::2"
  int prefix_len = 0;     // 24
};

// IPv4 and global IPv6 addresses (link-local and loopback left out: no peer on another host reaches them).
std::vector<InterfaceAddress> interface_addresses();

struct AdvertisedNic {
  const Nic* nic;
  InterfaceAddress address;
};

// Each usable NIC of `t` with a net device, once per address `addresses` give it; NICs in topology order.
std::vector<AdvertisedNic> advertised(const Topology& t, const std::vector<InterfaceAddress>& addresses);

}  // namespace kvs::topology
