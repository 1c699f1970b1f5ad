package inject

import (
	"encoding/base64"
	"math/bits"
	"sort"
	"unicode"
	"unicode/utf8"
)

// Feature extraction shared by training (cmd/guard-train) and inference:
// the text is normalised (lower case, JSON escapes undone, invisible
// characters removed, tag-block characters decoded, homoglyphs and
// full-width forms folded), then hashed into a fixed number of buckets:
// word unigrams and bigrams, character n-grams, and a few flag features
// (invisible characters present, a base64 run that decodes to text). A
// base64 run that decodes to printable text contributes the features of the
// decoded text as well, so an encoded payload meets the same weights as a
// plain one.

// featureSpec says which features a model uses; it is stored in the model
// file so that inference always matches training.
type featureSpec struct {
	Bits      uint8 // log2 of the number of buckets
	CharMin   uint8 // smallest character n-gram (bytes of normalised text)
	CharMax   uint8 // largest character n-gram
	WordGrams uint8 // 1: unigrams, 2: unigrams and bigrams
	// Block, in normalised bytes: a feature counts once per block, so that
	// repeating a line does not amplify what it says. 0: the whole text is
	// one block.
	Block int
}

// Hash seeds, one per feature family, so that a word and a character
// n-gram with the same bytes land in different buckets.
const (
	seedWord   = 0x9e3779b97f4a7c15
	seedBigram = 0xc2b2ae3d27d4eb4f
	seedChar   = 0x165667b19e3779f9
	seedFlag   = 0x27d4eb2f165667c5
	seedLeet   = 0x85ebca77c2b2ae63
	seedJoined = 0xff51afd7ed558ccd
)

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func hashBytes(seed uint64, b []byte) uint64 {
	h := uint64(fnvOffset) ^ seed
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return mix(h)
}

func hashString(seed uint64, s string) uint64 {
	h := uint64(fnvOffset) ^ seed
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return mix(h)
}

// grams234 returns in dst[0:len(norm)*3] the buckets of norm's character
// 2-, 3- and 4-grams, hashBytes(seedChar+n, norm[i:i+n])&mask at
// dst[(n-2)*len(norm)+i] (the slots past each n's last gram are unused),
// computed in one pass. mask must fit in 32 bits.
func grams234(dst []uint32, norm []byte, mask uint64) []uint32 {
	k := len(norm)
	if cap(dst) < 3*k {
		dst = make([]uint32, 3*k)
	}
	dst = dst[:3*k]
	d2, d3, d4 := dst[:k], dst[k:2*k], dst[2*k:3*k]
	const (
		o2 = uint64(fnvOffset) ^ (seedChar + 2)
		o3 = uint64(fnvOffset) ^ (seedChar + 3)
		o4 = uint64(fnvOffset) ^ (seedChar + 4)
	)
	for i := 0; i+4 <= k; i++ {
		c0, c1, c2, c3 := uint64(norm[i]), uint64(norm[i+1]), uint64(norm[i+2]), uint64(norm[i+3])
		h2 := (((o2 ^ c0) * fnvPrime) ^ c1) * fnvPrime
		h3 := (((((o3 ^ c0) * fnvPrime) ^ c1) * fnvPrime) ^ c2) * fnvPrime
		h4 := (((((((o4 ^ c0) * fnvPrime) ^ c1) * fnvPrime) ^ c2) * fnvPrime) ^ c3) * fnvPrime
		d2[i], d3[i], d4[i] = uint32(mix(h2)&mask), uint32(mix(h3)&mask), uint32(mix(h4)&mask)
	}
	// the last grams of 2 and 3 bytes
	if k >= 3 {
		d2[k-3] = uint32(hashBytes(seedChar+2, norm[k-3:k-1]) & mask)
		d3[k-3] = uint32(hashBytes(seedChar+3, norm[k-3:k]) & mask)
	}
	if k >= 2 {
		d2[k-2] = uint32(hashBytes(seedChar+2, norm[k-2:k]) & mask)
	}
	return dst
}

// mix is the murmur3 finaliser: FNV alone spreads short keys badly over the
// low bits that pick a bucket.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// flags found while normalising.
type normFlags struct {
	tagBlock  bool // Unicode tag characters U+E0000–E007F
	zeroWidth bool // zero-width characters
	bidi      bool // bidirectional controls
	base64    bool // a base64 run that decodes to text
}

// maxDecodeDepth bounds base64-in-base64 recursion.
const maxDecodeDepth = 2

// extractor holds reusable buffers; it is not safe for concurrent use.
type extractor struct {
	spec    featureSpec
	mask    uint64
	norm    []byte
	offs    []int32 // offs[j]: byte offset in the text of normalised byte j (top level)
	words   [][2]int
	tmp     []byte
	hashes  []uint32 // character n-gram buckets of one n
	hashes3 []uint32 // of n = 2, 3 and 4 (grams234)
	out     []uint32
	pos     []int32 // pos[i]: normalised offset where feature i starts; -1: whole text
	flags   normFlags

	topLen int   // length of the top-level normalised text
	base   int32 // position given to the features of a decoded run (depth > 0)
	depth  int

	// seen[bucket] == gen<<32 | block+1: the feature is already in the block.
	// A text starts with the small table instead (tab), which holds
	// the same thing for the buckets the text touches and stays in cache;
	// when it fills, its entries move to seen for the rest of the text.
	seen      []uint64
	gen       uint64
	tab       []seenSlot
	tabN      int
	small     bool
	blockBits int  // log2(spec.Block) when it is a power of two, else -1
	noTab     bool // tests: seen only, no small table

	// scoring buffers
	blockZ [][numClasses]float32
	blockN []int32
}

func newExtractor(spec featureSpec) *extractor {
	e := &extractor{spec: spec, mask: 1<<spec.Bits - 1, blockBits: -1}
	if b := spec.Block; b > 0 && b&(b-1) == 0 {
		e.blockBits = bits.TrailingZeros(uint(b))
	}
	return e
}

// seenSlot is an entry of the small table: bucket f was last counted in
// block-1 (as uint32(block+1), like the low half of a seen key) during the
// text numbered gen (the low half of extractor.gen).
type seenSlot struct{ gen, f, block uint32 }

// tabSize is the small table's size; it takes up to tabSize/2 buckets.
const tabSize = 1 << 12

// firstInBlock reports whether bucket f is not yet counted in block b (as
// uint32(block+1)) and records that it now is: "the last block f was
// counted in is b".
func (e *extractor) firstInBlock(f uint64, b uint32) bool {
	if e.small {
		g := uint32(e.gen)
		for i := uint32(f) & (tabSize - 1); ; i = (i + 1) & (tabSize - 1) {
			s := &e.tab[i]
			if s.gen != g {
				if e.tabN < tabSize/2 {
					*s = seenSlot{gen: g, f: uint32(f), block: b}
					e.tabN++
					return true
				}
				e.spill()
				break
			}
			if s.f == uint32(f) {
				if s.block == b {
					return false
				}
				s.block = b
				return true
			}
		}
	}
	key := e.gen<<32 | uint64(b)
	if e.seen[f] == key {
		return false
	}
	e.seen[f] = key
	return true
}

// emitChars emits the character n-gram features whose buckets are hs,
// hs[i] starting at normalised byte i: emit for each, in order, with the
// common case (top level, small table, block a power of two) inline.
func (e *extractor) emitChars(hs []uint32) {
	i := 0
	if e.depth == 0 && e.blockBits >= 0 {
		g := uint32(e.gen)
		tab := e.tab[:tabSize]
		shift := uint(e.blockBits)
		out, pos := e.out, e.pos
		for ; i < len(hs) && e.small && e.tabN < tabSize/2; i++ {
			f := hs[i]
			b := uint32(i>>shift + 1)
			for j := f & (tabSize - 1); ; j = (j + 1) & (tabSize - 1) {
				s := &tab[j]
				if s.gen != g {
					*s = seenSlot{gen: g, f: f, block: b}
					e.tabN++
					out, pos = append(out, f), append(pos, int32(i))
					break
				}
				if s.f == f {
					if s.block != b {
						s.block = b
						out, pos = append(out, f), append(pos, int32(i))
					}
					break
				}
			}
		}
		e.out, e.pos = out, pos
	}
	for ; i < len(hs); i++ {
		e.emit(uint64(hs[i]), i)
	}
}

// spill moves the small table's entries of this text to seen, which
// takes over for the rest of the text.
func (e *extractor) spill() {
	if e.seen == nil {
		e.seen = make([]uint64, e.mask+1)
	}
	g := uint32(e.gen)
	for _, s := range e.tab {
		if s.gen == g {
			e.seen[s.f] = e.gen<<32 | uint64(s.block)
		}
	}
	e.small = false
}

// features returns the bucket of every feature occurrence in text (with
// repeats); e.pos holds where each starts. The slices are reused by the next
// call.
func (e *extractor) features(text string) []uint32 {
	e.out, e.pos = e.out[:0], e.pos[:0]
	e.flags = normFlags{}
	if e.tab == nil {
		e.tab = make([]seenSlot, tabSize)
	}
	e.gen++
	if uint32(e.gen) == 0 {
		// The small table's stamps wrapped: empty it (gen 0 is no text).
		clear(e.tab)
		e.gen++
	}
	e.small, e.tabN = !e.noTab, 0
	if e.noTab && e.seen == nil {
		e.seen = make([]uint64, e.mask+1)
	}
	e.depth, e.base = 0, 0
	e.add(text)
	if e.flags.tagBlock {
		e.flag("tagblock")
	}
	if e.flags.zeroWidth {
		e.flag("zerowidth")
	}
	if e.flags.bidi {
		e.flag("bidi")
	}
	if e.flags.base64 {
		e.flag("base64text")
	}
	return e.out
}

func (e *extractor) emit(h uint64, p int) {
	if e.depth > 0 {
		p = int(e.base)
	}
	f := h & e.mask
	block := 0
	if e.blockBits >= 0 {
		block = p >> e.blockBits // p >= 0
	} else if e.spec.Block > 0 {
		block = p / e.spec.Block
	}
	// Features of one family come in order of position, so remembering the
	// last block a bucket was seen in is enough to count it once per block.
	if !e.firstInBlock(f, uint32(block+1)) {
		return
	}
	e.out = append(e.out, uint32(f))
	e.pos = append(e.pos, int32(p))
}

func (e *extractor) flag(name string) {
	e.out = append(e.out, uint32(hashString(seedFlag, name)&e.mask))
	e.pos = append(e.pos, -1) // counts in every window
}

func (e *extractor) add(text string) {
	if e.depth == 0 {
		e.offs = e.offs[:0]
		e.norm = normalize(e.norm[:0], &e.offs, text, &e.flags)
		e.topLen = len(e.norm)
	} else {
		e.norm = normalize(e.norm[:0], nil, text, &e.flags)
	}
	e.gramsOf(e.norm)
	if e.depth < maxDecodeDepth {
		e.decodedRuns(text)
	}
}

// gramsOf adds the word and character features of normalised text.
func (e *extractor) gramsOf(norm []byte) {
	// character n-grams over the bytes of the normalised text: the hashes
	// first (a loop of arithmetic only), then their features in order.
	if e.spec.CharMin == 2 && e.spec.CharMax == 4 && len(norm) >= 4 {
		// The committed model's n-grams: the three hashes of a position
		// in one pass.
		e.hashes3 = grams234(e.hashes3, norm, e.mask)
		k := len(norm)
		h := e.hashes3
		e.emitChars(h[:k-1])
		e.emitChars(h[k : 2*k-2])
		e.emitChars(h[2*k : 3*k-3])
	} else {
		for n := int(e.spec.CharMin); n <= int(e.spec.CharMax) && n > 0; n++ {
			if len(norm) < n {
				break
			}
			hs := e.hashes[:0]
			seed := seedChar + uint64(n)
			for i := 0; i+n <= len(norm); i++ {
				hs = append(hs, uint32(hashBytes(seed, norm[i:i+n])&e.mask))
			}
			e.hashes = hs
			e.emitChars(hs)
		}
	}
	// words: runs of letters and digits
	e.words = wordSpans(e.words[:0], norm)
	var prev uint64
	single := 0 // run of one-letter words ("i g n o r e")
	for k, w := range e.words {
		tok := norm[w[0]:w[1]]
		h := hashBytes(seedWord, tok)
		e.emit(h, w[0])
		if e.spec.WordGrams >= 2 && k > 0 {
			e.emit(mix(prev*31+h+seedBigram), w[0])
		}
		prev = h
		if leet, ok := unleet(e.tmp[:0], tok); ok {
			e.tmp = leet
			e.emit(hashBytes(seedLeet, leet), w[0])
		}
		if utf8.RuneCount(tok) == 1 {
			single++
		} else {
			e.joinSingles(norm, k, single)
			single = 0
		}
	}
	e.joinSingles(norm, len(e.words), single)
}

// joinSingles adds the word formed by a run of n one-letter words ending
// before word index end, when the run is long enough to be spaced-out text.
func (e *extractor) joinSingles(norm []byte, end, n int) {
	if n < 4 {
		return
	}
	e.tmp = e.tmp[:0]
	for _, w := range e.words[end-n : end] {
		e.tmp = append(e.tmp, norm[w[0]:w[1]]...)
	}
	p := e.words[end-n][0]
	e.emit(hashBytes(seedJoined, e.tmp), p)
	e.emit(hashBytes(seedWord, e.tmp), p)
}

// decodedRuns finds base64 runs in the raw text that decode to printable
// text and adds the features of the decoded text, placed where the run
// starts.
func (e *extractor) decodedRuns(text string) {
	for _, r := range base64Runs(text) {
		dec, ok := decodeBase64Text(text[r[0]:r[1]])
		if !ok {
			continue
		}
		e.flags.base64 = true
		if e.depth == 0 {
			e.base = int32(sort.Search(len(e.offs), func(j int) bool { return int(e.offs[j]) >= r[0] }))
		}
		e.depth++
		e.add(dec) // reuses e.norm: the outer text's grams are done
		e.depth--
	}
}

// wordSpans returns the [start,end) byte spans of the runs of letters and
// digits in norm.
func wordSpans(dst [][2]int, norm []byte) [][2]int {
	start := -1
	for i := 0; i < len(norm); {
		r, size := rune(norm[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRune(norm[i:])
		}
		isWord := r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= '0' && r <= '9') ||
			r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r))
		if isWord && start < 0 {
			start = i
		} else if !isWord && start >= 0 {
			dst = append(dst, [2]int{start, i})
			start = -1
		}
		i += size
	}
	if start >= 0 {
		dst = append(dst, [2]int{start, len(norm)})
	}
	return dst
}

// unleet folds digits used as letters in a token that mixes letters and
// digits ("1gn0r3" -> "ignore"); ok is false for tokens it leaves alone.
func unleet(dst, tok []byte) ([]byte, bool) {
	letters, digits := 0, 0
	for _, c := range tok {
		switch {
		case c >= 'a' && c <= 'z':
			letters++
		case c >= '0' && c <= '9':
			digits++
		}
	}
	if letters == 0 || digits == 0 || letters+digits != len(tok) {
		return dst, false
	}
	for _, c := range tok {
		switch c {
		case '0':
			c = 'o'
		case '1':
			c = 'i'
		case '3':
			c = 'e'
		case '4':
			c = 'a'
		case '5':
			c = 's'
		case '7':
			c = 't'
		case '8':
			c = 'b'
		}
		dst = append(dst, c)
	}
	return dst, true
}

// normalize appends the normalised form of s to dst.
// When offs is not nil, the offset in s of each byte appended is appended
// to it.
func normalize(dst []byte, offs *[]int32, s string, f *normFlags) []byte {
	space := true // collapse leading and repeated white space
	at := 0       // offset in s of the rune being emitted
	emit := func(r rune) {
		if r == ' ' {
			if space {
				return
			}
			space = true
		} else {
			space = false
		}
		n := len(dst)
		dst = utf8.AppendRune(dst, r)
		if offs != nil {
			for range len(dst) - n {
				*offs = append(*offs, int32(at))
			}
		}
	}
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf && c != '\\' {
			// ASCII: foldRune and emit, inline.
			switch {
			case 'A' <= c && c <= 'Z':
				c += 'a' - 'A'
			case c < 0x20 || c == 0x7f:
				c = ' '
			}
			if c == ' ' {
				if space {
					i++
					continue
				}
				space = true
			} else {
				space = false
			}
			dst = append(dst, c)
			if offs != nil {
				*offs = append(*offs, int32(i))
			}
			i++
			continue
		}
		at = i
		r, size := rune(s[i]), 1
		if r >= utf8.RuneSelf {
			r, size = utf8.DecodeRuneInString(s[i:])
		}
		if r == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'n', 't', 'r', '"', '\\', '/', 'b', 'f':
				emit(' ')
				i += 2
				continue
			case 'u':
				if u, ok := hex4(s, i+2); ok {
					i += 6
					// surrogate pair
					if u >= 0xD800 && u < 0xDC00 && i+1 < len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if lo, ok := hex4(s, i+2); ok && lo >= 0xDC00 && lo < 0xE000 {
							u = 0x10000 + (u-0xD800)<<10 + (lo - 0xDC00)
							i += 6
						}
					}
					if m, keep := foldRune(u, f); keep {
						emit(m)
					}
					continue
				}
			}
		}
		i += size
		if m, keep := foldRune(r, f); keep {
			emit(m)
		}
	}
	return dst
}

func hex4(s string, i int) (rune, bool) {
	if i+4 > len(s) {
		return 0, false
	}
	var v rune
	for _, c := range []byte(s[i : i+4]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// foldRune maps one rune to its normalised form; keep is false for runes
// that are dropped.
func foldRune(r rune, f *normFlags) (rune, bool) {
	if r < utf8.RuneSelf {
		switch {
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A', true
		case r == '\n' || r == '\t' || r == '\r' || r == '\v' || r == '\f':
			return ' ', true
		case r < 0x20 || r == 0x7f:
			return ' ', true
		}
		return r, true
	}
	switch {
	case r >= 0xE0000 && r <= 0xE007F:
		f.tagBlock = true
		if r >= 0xE0020 && r <= 0xE007E {
			return foldRune(r-0xE0000, f)
		}
		return 0, false
	case isZeroWidth(r):
		f.zeroWidth = true
		return 0, false
	case isBidi(r):
		f.bidi = true
		return 0, false
	case r >= 0xFF01 && r <= 0xFF5E: // full-width ASCII
		return foldRune(r-0xFF01+0x21, f)
	case r == 0x3000:
		return ' ', true
	}
	if h, ok := homoglyphs[r]; ok {
		return h, true
	}
	if unicode.IsSpace(r) {
		return ' ', true
	}
	return unicode.ToLower(r), true
}

func isZeroWidth(r rune) bool {
	switch r {
	case 0x200B, 0x200C, 0x200D, 0x2060, 0x2061, 0x2062, 0x2063, 0x2064, 0xFEFF, 0x180E, 0x00AD:
		return true
	}
	return false
}

func isBidi(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
}

// homoglyphs folds Cyrillic and Greek letters that look like Latin ones.
var homoglyphs = map[rune]rune{
	'а': 'a', 'А': 'a', 'е': 'e', 'Е': 'e', 'о': 'o', 'О': 'o', 'р': 'p', 'Р': 'p',
	'с': 'c', 'С': 'c', 'у': 'y', 'У': 'y', 'х': 'x', 'Х': 'x', 'і': 'i', 'І': 'i',
	'ј': 'j', 'Ј': 'j', 'ѕ': 's', 'Ѕ': 's', 'ԁ': 'd', 'һ': 'h', 'Һ': 'h', 'ӏ': 'l',
	'В': 'b', 'Н': 'h', 'К': 'k', 'М': 'm', 'Т': 't', 'ο': 'o', 'Ο': 'o', 'α': 'a',
	'Α': 'a', 'ε': 'e', 'Ε': 'e', 'ι': 'i', 'Ι': 'i', 'κ': 'k', 'Κ': 'k', 'ν': 'v',
	'ρ': 'p', 'Ρ': 'p', 'τ': 't', 'Τ': 't', 'υ': 'u', 'χ': 'x', 'Χ': 'x', 'Β': 'b',
	'Η': 'h', 'Μ': 'm', 'Ν': 'n', 'Ζ': 'z',
}

// minBase64 is the shortest run tried as base64: 24 characters decode to 18
// bytes, about three words.
const minBase64 = 24

// base64Runs returns the [start,end) spans of runs of base64 characters
// (standard or URL alphabet, with padding) at least minBase64 long.
func base64Runs(s string) [][2]int {
	var runs [][2]int
	start := -1
	for i := 0; i <= len(s); i++ {
		in := i < len(s) && isB64(s[i])
		if in && start < 0 {
			start = i
		} else if !in && start >= 0 {
			if i-start >= minBase64 {
				runs = append(runs, [2]int{start, i})
			}
			start = -1
		}
	}
	return runs
}

func isB64(c byte) bool { return b64Chars[c] }

var b64Chars = func() (t [256]bool) {
	for c := range 256 {
		t[c] = c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
			c == '+' || c == '/' || c == '-' || c == '_' || c == '='
	}
	return t
}()

// decodeBase64Text decodes s as base64 (any common alphabet, padded or not)
// and reports whether the result is printable UTF-8 text with some spaces,
// which is what an encoded instruction looks like (and a key, digest or
// image is not).
func decodeBase64Text(s string) (string, bool) {
	// Trim padding and decode raw; a run may also be an ordinary long word.
	for len(s) > 0 && s[len(s)-1] == '=' {
		s = s[:len(s)-1]
	}
	var dec []byte
	var err error
	if containsAny(s, "-_") {
		dec, err = base64.RawURLEncoding.DecodeString(s)
	} else {
		dec, err = base64.RawStdEncoding.DecodeString(s)
	}
	if err != nil || len(dec) < 12 || !utf8.Valid(dec) {
		return "", false
	}
	spaces, bad := 0, 0
	for _, r := range string(dec) {
		switch {
		case r == ' ':
			spaces++
		case r == '\n' || r == '\t' || r == '\r':
		case r < 0x20 || r == 0x7f || r == utf8.RuneError:
			bad++
		}
	}
	if bad > 0 || spaces < 2 {
		return "", false
	}
	return string(dec), true
}

func containsAny(s, chars string) bool {
	for i := 0; i < len(s); i++ {
		for j := 0; j < len(chars); j++ {
			if s[i] == chars[j] {
				return true
			}
		}
	}
	return false
}
