package daemon

import (
	"fmt"
	"net/netip"

	"github.com/warden-sandbox/warden/internal/config"
	"github.com/warden-sandbox/warden/internal/image"
	"github.com/warden-sandbox/warden/internal/network"
)

// imagePolicy is the policy of image imports: registries.allow, the
// egress path's address classification with the network.deny ranges
// (refused to registries as to sandboxes) and the images limits.
func imagePolicy(cfg config.Config) (*image.Policy, error) {
	var allow []image.Registry
	for _, r := range cfg.Registries.Allow {
		allow = append(allow, image.Registry{Host: r.Host, Insecure: r.Insecure})
	}
	var deny []netip.Prefix
	for _, c := range cfg.Network.Deny {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("network.deny %q: %w", c, err)
		}
		deny = append(deny, p)
	}
	im := cfg.Images
	p, err := image.NewPolicy(allow, network.NewDestinationPolicy(deny), image.Limits{
		MaxBytes: im.MaxUncompressedBytes, MaxEntries: im.MaxEntries, MaxRatio: im.MaxRatio,
		RatioMinBytes: im.RatioMinBytes, MaxDownloadBytes: im.MaxDownloadBytes,
	})
	if err != nil {
		return nil, fmt.Errorf("image policy: %w", err)
	}
	return p, nil
}
