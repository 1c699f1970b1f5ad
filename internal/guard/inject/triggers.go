package inject

import "strings"

// triggerIndex says which groups of lower-case ASCII triggers a text holds,
// as strings.Contains(strings.ToLower(text), trigger) would, in one pass over
// the text: a table of the triggers' first two bytes rejects most positions
// with one lookup. The heuristics' rules run their regular expressions only
// on texts that hold one of their triggers.
type triggerIndex struct {
	words  []string
	group  []uint8
	pairs  [65536 / 64]uint64
	starts map[uint16][]int
	short  []int  // one-byte triggers
	all    uint32 // the mask of every group
}

// trigger groups: rules[i] is group i; the ROT13 triggers come last.
var rot13Triggers = []string{"vtaber", "qvfertneq", "vafgehpgvbaf"}

var ruleTriggers = func() *triggerIndex {
	groups := make([][]string, 0, len(rules)+1)
	for i := range rules {
		groups = append(groups, rules[i].triggers)
	}
	groups = append(groups, rot13Triggers)
	return newTriggerIndex(groups)
}()

// rot13Group is the group of rot13Triggers in ruleTriggers.
var rot13Group = len(rules)

func newTriggerIndex(groups [][]string) *triggerIndex {
	x := &triggerIndex{starts: map[uint16][]int{}}
	for g, ws := range groups {
		x.all |= 1 << g
		for _, w := range ws {
			if w == "" || strings.ToLower(w) != w {
				continue // never in a lower-cased text (nor was it before)
			}
			if len(w) == 1 {
				x.short = append(x.short, len(x.words))
			} else {
				p := uint16(w[0])<<8 | uint16(w[1])
				x.pairs[p/64] |= 1 << (p % 64)
				x.starts[p] = append(x.starts[p], len(x.words))
			}
			x.words = append(x.words, w)
			x.group = append(x.group, uint8(g))
		}
	}
	return x
}

// groups returns the mask of the groups whose triggers text holds, as
// strings.ToLower(text) holds them, and whether text is all ASCII.
func (x *triggerIndex) groups(text string) (found uint32, ascii bool) {
	for i := 0; i < len(text); i++ {
		if text[i] >= 0x80 {
			// Unicode case folding can turn other bytes into ASCII
			// letters (the Kelvin sign): fold the text as before.
			return x.scan(strings.ToLower(text)), false
		}
	}
	return x.scan(text), true
}

// scan finds the triggers in ASCII text, ignoring ASCII case.
func (x *triggerIndex) scan(t string) uint32 {
	var found uint32
	for _, w := range x.short {
		c := x.words[w][0]
		if strings.IndexByte(t, c) >= 0 || 'a' <= c && c <= 'z' && strings.IndexByte(t, c-'a'+'A') >= 0 {
			found |= 1 << x.group[w]
		}
	}
	for i := 0; i+1 < len(t); i++ {
		p := uint16(lowerASCII(t[i]))<<8 | uint16(lowerASCII(t[i+1]))
		if x.pairs[p/64]&(1<<(p%64)) == 0 {
			continue
		}
		for _, w := range x.starts[p] {
			g := uint32(1) << x.group[w]
			if found&g == 0 && hasPrefixFoldASCII(t[i:], x.words[w]) {
				found |= g
				if found == x.all {
					return found
				}
			}
		}
	}
	return found
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func hasPrefixFoldASCII(s, lowerPrefix string) bool {
	if len(s) < len(lowerPrefix) {
		return false
	}
	for i := 0; i < len(lowerPrefix); i++ {
		if lowerASCII(s[i]) != lowerPrefix[i] {
			return false
		}
	}
	return true
}
