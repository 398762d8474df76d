// Command cel-ip-oracle prints, for a fixed corpus of strings, what the IP and CIDR functions of
// the Kubernetes CEL library (k8s.io/apiserver/pkg/cel/library, ip.go and cidr.go, at the
// version of tools/versions.env) return for them, so the rules' own functions can be compared
// with Go's. The library is a thin layer over net/netip; this program is that layer, copied:
// parseIPAddr and parseCIDR (netip.ParseAddr and ParsePrefix, refusing zones and IPv4-mapped
// IPv6 addresses) and each function as the library binds it.
//
// Output: one JSON object per line (core/tests/fixtures/cel_ip_corpus.jsonl):
//
//	{"kind":"ip","input":"::1","ok":true,"string":"::1","family":6,"isCanonical":true,
//	 "isUnspecified":false,"isLoopback":true,"isLinkLocalMulticast":false,
//	 "isLinkLocalUnicast":false,"isGlobalUnicast":false}
//	{"kind":"cidr","input":"10.0.0.1/8","ok":true,"string":"10.0.0.1/8","ip":"10.0.0.1",
//	 "masked":"10.0.0.0/8","prefixLength":8}
//	{"kind":"containsIP","cidr":"10.0.0.0/8","other":"10.1.2.3","result":true}
//	{"kind":"containsCIDR","cidr":"10.0.0.0/8","other":"10.1.0.0/16","result":true}
//
// Run: cd tools/cel-ip-oracle && go run . > ../../core/tests/fixtures/cel_ip_corpus.jsonl
package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
)

func parseIPAddr(raw string) (netip.Addr, error) {
	addr, err := netip.ParseAddr(raw)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("IP Address %q parse error during conversion from string: %v", raw, err)
	}
	if addr.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("IP address %q with zone value is not allowed", raw)
	}
	if addr.Is4In6() {
		return netip.Addr{}, fmt.Errorf("IPv4-mapped IPv6 address %q is not allowed", raw)
	}
	return addr, nil
}

func parseCIDR(raw string) (netip.Prefix, error) {
	net, err := netip.ParsePrefix(raw)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("network address parse error during conversion from string: %v", err)
	}
	if net.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("IPv4-mapped IPv6 address %q is not allowed", raw)
	}
	return net, nil
}

var ips = []string{
	"127.0.0.1", "0.0.0.0", "255.255.255.255", "10.0.0.11", "192.168.0.1", "169.254.169.254",
	"169.253.1.1", "224.0.0.1", "224.0.1.1", "239.255.255.255", "100.64.0.1", "1.2.3.4",
	"::", "::1", "::2", "fe80::1", "febf::1", "fec0::1", "ff02::1", "ff12::1", "ff05::2", "ff00::1",
	"fd00::11", "fd80::1", "2001:db8::abcd", "2001:DB8::ABCD", "2001:db8::0:0:0:abcd",
	"2001:db8:0:0:1:0:0:1", "2001:0db8::1", "1:0:0:0:0:0:0:8", "1::", "1:2:3:4:5:6:7:8",
	"::1.2.3.4", "64:ff9b::1.2.3.4", "::ffff:1.2.3.4", "::ffff:0102:0304", "::ffff:127.0.0.1",
	"fe80::1%eth0", "fe80::1%", "127.0.0.256", "127.0.0", "127.0.0.1.1", "01.2.3.4", "1.2.3.04",
	"0.0.0.00", "1.2.3.4 ", " 1.2.3.4", "", ":::1", "1:2:3:4:5:6:7:8:9", "12345::1", "::g",
	"0x7f.0.0.1", "2130706433", "1.2.3.4/32", "[::1]", "1::2::3", "::1.2.3", "1.2.3.4:80",
	"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "0:0:0:0:0:0:0:1", "::0:1", "FE80::1",
}

var cidrs = []string{
	"10.0.0.0/8", "10.0.0.1/8", "192.168.0.0/16", "192.168.0.1/24", "0.0.0.0/0", "1.2.3.4/32",
	"1.2.3.4/33", "1.2.3.4/-1", "1.2.3.4/+8", "1.2.3.4/08", "1.2.3.4/0", "1.2.3.4/00", "1.2.3.4/",
	"1.2.3.4", "1.2.3.4/8/8", "01.2.3.4/8", "::/0", "::1/128", "::1/129", "fd00::/8", "fd00::11/64",
	"2001:db8::/32", "2001:DB8::/32", "2001:db8::0:1/64", "::ffff:1.2.3.0/120", "::ffff:0:0/96",
	"fe80::1%eth0/64", "10.20.0.0/16", "10.20.0.0/ 16", " 10.20.0.0/16", "64:ff9b::/96",
	"::1.2.3.0/120", "10.0.0.0/8x", "/8", "10.0.0.0/1a",
}

var containsIP = [][2]string{
	{"10.0.0.0/8", "10.1.2.3"}, {"10.0.0.0/8", "11.0.0.0"}, {"10.0.0.1/8", "10.255.255.255"},
	{"192.168.0.0/24", "192.168.0.1"}, {"192.168.0.0/24", "192.168.1.1"}, {"0.0.0.0/0", "1.2.3.4"},
	{"0.0.0.0/0", "::1"}, {"::/0", "1.2.3.4"}, {"::/0", "::1"}, {"fd00::/8", "fd00::11"},
	{"fd00::/8", "fe00::1"}, {"10.20.0.0/16", "10.20.255.1"}, {"10.20.0.0/16", "10.21.0.1"},
	{"1.2.3.4/32", "1.2.3.4"}, {"1.2.3.4/32", "1.2.3.5"}, {"::1/128", "::1"}, {"::1.2.3.0/120", "1.2.3.4"},
	{"fd00::11/64", "fd00::ffff"}, {"fd00::11/64", "fd00:0:0:1::1"}, {"10.0.0.0/8", "::ffff:10.0.0.1"},
	{"10.0.0.0/8", "10.0.0.01"},
}

var containsCIDR = [][2]string{
	{"10.0.0.0/8", "10.1.0.0/16"}, {"10.1.0.0/16", "10.0.0.0/8"}, {"10.0.0.0/8", "10.0.0.0/8"},
	{"10.0.0.1/8", "10.2.0.0/16"}, {"10.0.0.0/8", "10.2.0.1/16"}, {"192.168.1.0/24", "192.168.2.0/24"},
	{"0.0.0.0/0", "1.2.3.4/32"}, {"0.0.0.0/0", "::/0"}, {"::/0", "fd00::/8"}, {"fd00::/8", "fd00::11/128"},
	{"fd00::/8", "fe00::/8"}, {"fd00::/7", "fc00::/8"}, {"fc00::/8", "fd00::/7"}, {"1.2.3.4/32", "1.2.3.4/32"},
	{"10.0.0.0/8", "10.0.0.0/08"}, {"10.0.0.0/8", "::ffff:10.0.0.0/104"},
}

func main() {
	out := json.NewEncoder(os.Stdout)
	emit := func(v map[string]any) {
		if err := out.Encode(v); err != nil {
			panic(err)
		}
	}
	for _, s := range ips {
		addr, err := parseIPAddr(s)
		row := map[string]any{"kind": "ip", "input": s, "ok": err == nil}
		if err == nil {
			family := 6
			if addr.Is4() {
				family = 4
			}
			row["string"] = addr.String()
			row["family"] = family
			row["isCanonical"] = addr.String() == s
			row["isUnspecified"] = addr.IsUnspecified()
			row["isLoopback"] = addr.IsLoopback()
			row["isLinkLocalMulticast"] = addr.IsLinkLocalMulticast()
			row["isLinkLocalUnicast"] = addr.IsLinkLocalUnicast()
			row["isGlobalUnicast"] = addr.IsGlobalUnicast()
		}
		emit(row)
	}
	for _, s := range cidrs {
		prefix, err := parseCIDR(s)
		row := map[string]any{"kind": "cidr", "input": s, "ok": err == nil}
		if err == nil {
			row["string"] = prefix.String()
			row["ip"] = prefix.Addr().String()
			row["masked"] = prefix.Masked().String()
			row["prefixLength"] = prefix.Bits()
		}
		emit(row)
	}
	// A string argument that does not parse is an error, as in the library.
	for _, pair := range containsIP {
		prefix, perr := parseCIDR(pair[0])
		addr, aerr := parseIPAddr(pair[1])
		row := map[string]any{"kind": "containsIP", "cidr": pair[0], "other": pair[1], "ok": perr == nil && aerr == nil}
		if perr == nil && aerr == nil {
			row["result"] = prefix.Contains(addr)
		}
		emit(row)
	}
	for _, pair := range containsCIDR {
		prefix, perr := parseCIDR(pair[0])
		other, oerr := parseCIDR(pair[1])
		row := map[string]any{"kind": "containsCIDR", "cidr": pair[0], "other": pair[1], "ok": perr == nil && oerr == nil}
		if perr == nil && oerr == nil {
			row["result"] = prefix.Overlaps(other) && prefix.Bits() <= other.Bits()
		}
		emit(row)
	}
}
