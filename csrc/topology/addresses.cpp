#include "topology/addresses.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <bitset>

namespace kvs::topology {
namespace {

int prefix_of(const sockaddr* mask) {
  if (mask == nullptr) return 0;
  int bits = 0;
  if (mask->sa_family == AF_INET) {
    bits = static_cast<int>(
        std::bitset<32>(ntohl(reinterpret_cast<const sockaddr_in*>(mask)->sin_addr.s_addr)).count());
  } else if (mask->sa_family == AF_INET6) {
    for (uint8_t byte : reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr.s6_addr) {
      bits += static_cast<int>(std::bitset<8>(byte).count());
    }
  }
  return bits;
}

}  // namespace

std::vector<InterfaceAddress> interface_addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_name == nullptr || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET6_ADDRSTRLEN] = {0};
    if (a->ifa_addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text));
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      if (IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) || IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) continue;
      inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    } else {
      continue;
    }
    out.push_back(InterfaceAddress{a->ifa_name, text, prefix_of(a->ifa_netmask)});
  }
  freeifaddrs(list);
  return out;
}

std::vector<AdvertisedNic> advertised(const Topology& t, const std::vector<InterfaceAddress>& addresses) {
  std::vector<AdvertisedNic> out;
  for (const Nic& nic : t.nics) {
    if (!nic.usable() || nic.name.empty()) continue;
    for (const auto& a : addresses) {
      if (a.interface == nic.name) out.push_back(AdvertisedNic{&nic, a});
    }
  }
  return out;
}

}  // namespace kvs::topology
