package cli

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"text/tabwriter"

	warden "github.com/warden-sandbox/warden/sdk/go"
)

// parseNetwork builds a policy from --net and --allow: "pypi.org",
// "*.github.com:443", "203.0.113.0/24:5432", "[2001:db8::/32]:443".
func parseNetwork(mode, allow string) (warden.NetworkPolicy, error) {
	p := warden.NetworkPolicy{Mode: mode}
	if p.Mode == "" {
		p.Mode = warden.NetworkAllowlist
	}
	switch p.Mode {
	case warden.NetworkNone, warden.NetworkAllowlist, warden.NetworkOpen:
	default:
		return p, fmt.Errorf("--net %q: want none, allowlist or open", mode)
	}
	for _, item := range strings.Split(allow, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if p.Mode != warden.NetworkAllowlist {
			return p, fmt.Errorf("--allow needs --net allowlist")
		}
		target, ports := item, []int(nil)
		if strings.HasPrefix(item, "[") {
			end := strings.Index(item, "]")
			if end < 0 {
				return p, fmt.Errorf("--allow %q: missing ]", item)
			}
			target = item[1:end]
			if rest := item[end+1:]; rest != "" {
				if !strings.HasPrefix(rest, ":") {
					return p, fmt.Errorf("--allow %q: want [ADDR]:PORT", item)
				}
				n, err := strconv.Atoi(rest[1:])
				if err != nil {
					return p, fmt.Errorf("--allow %q: bad port", item)
				}
				ports = []int{n}
			}
		} else if i := strings.LastIndexByte(item, ':'); i >= 0 && strings.Count(item, ":") == 1 {
			n, err := strconv.Atoi(item[i+1:])
			if err != nil {
				return p, fmt.Errorf("--allow %q: bad port", item)
			}
			target, ports = item[:i], []int{n}
		}
		r := warden.NetworkRule{Ports: ports}
		if _, err := netip.ParsePrefix(target); err == nil {
			r.CIDR = target
		} else if a, err := netip.ParseAddr(target); err == nil {
			r.CIDR = netip.PrefixFrom(a, a.BitLen()).String()
		} else {
			r.Host = target
		}
		p.Allow = append(p.Allow, r)
	}
	return p, nil
}

func sandboxNetCmd() *command {
	var netMode, allow string
	c := &command{
		name:  "net",
		args:  "ID",
		short: "Show or change a sandbox's network policy",
		long: "Without flags, show the sandbox's network policy and traffic counters. With --net (and\n" +
			"--allow), replace the policy; new connections follow it at once. Whatever the mode, the\n" +
			"host's loopback, private ranges, cloud metadata addresses and other sandboxes stay\n" +
			"unreachable, and DNS goes only through Warden's resolver.",
		examples: []string{
			"warden sandbox net sb-01hzx3k9q2",
			"warden sandbox net sb-01hzx3k9q2 --net allowlist --allow pypi.org,files.pythonhosted.org",
			"warden sandbox net sb-01hzx3k9q2 --net none",
		},
		json: true,
	}
	c.flags = func(fs *flagSet) {
		fs.String(&netMode, "net", "MODE", "none, allowlist or open")
		fs.String(&allow, "allow", "LIST", "with --net allowlist: hosts, CIDRs, each with :PORT, comma-separated")
	}
	c.run = func(ctx context.Context, r *runner, args []string) error {
		if len(args) != 1 {
			return usageErr(c, "want one sandbox ID")
		}
		cl, err := r.client()
		if err != nil {
			return err
		}
		var st warden.NetworkStatus
		if netMode == "" && allow == "" {
			st, err = cl.GetNetwork(ctx, args[0])
		} else {
			p, perr := parseNetwork(netMode, allow)
			if perr != nil {
				return usageErr(c, "%v", perr)
			}
			st, err = cl.SetNetwork(ctx, args[0], p)
		}
		if err != nil {
			return err
		}
		if r.g.json {
			return printJSON(r.env.Stdout, st)
		}
		tw := tabwriter.NewWriter(r.env.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "mode:\t%s\n", st.Policy.Mode)
		for _, rule := range st.Policy.Allow {
			target := rule.Host
			if target == "" {
				target = rule.CIDR
			}
			fmt.Fprintf(tw, "allow:\t%s\tports %v\n", target, rule.Ports)
		}
		if s := st.Stats; s != nil {
			fmt.Fprintf(tw, "traffic:\t%s out, %s in, %d TCP, %d UDP, %d denied, %d DNS queries\n",
				bytesIEC(int64(s.BytesOut)), bytesIEC(int64(s.BytesIn)), s.TCPConnections, s.UDPFlows, s.Denied, s.DNSQueries)
			for _, d := range s.RecentDenials {
				fmt.Fprintf(tw, "denied:\t%s\t%s\n", denialTarget(d), d.Reason)
			}
		}
		return tw.Flush()
	}
	return c
}

// denialTarget writes a denial's target as "tcp 10.0.0.1:80": the daemon's target already
// starts with the protocol, which is added only when it does not.
func denialTarget(d warden.NetworkDenial) string {
	if d.Proto == "" || strings.HasPrefix(d.Target, d.Proto+" ") {
		return d.Target
	}
	return d.Proto + " " + d.Target
}
