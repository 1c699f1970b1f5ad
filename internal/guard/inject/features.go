package inject

import (
	"encoding/base64"
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
	spec  featureSpec
	mask  uint64
	norm  []byte
	offs  []int32 // offs[j]: byte offset in the text of normalised byte j (top level)
	words [][2]int
	tmp   []byte
	out   []uint32
	pos   []int32 // pos[i]: normalised offset where feature i starts; -1: whole text
	flags normFlags

	topLen int   // length of the top-level normalised text
	base   int32 // position given to the features of a decoded run (depth > 0)
	depth  int

	// seen[bucket] == gen<<32 | block+1: the feature is already in the block
	seen []uint64
	gen  uint64

	// scoring buffers
	blockZ [][numClasses]float32
	blockN []int32
}

func newExtractor(spec featureSpec) *extractor {
	return &extractor{spec: spec, mask: 1<<spec.Bits - 1}
}

// features returns the bucket of every feature occurrence in text (with
// repeats); e.pos holds where each starts. The slices are reused by the next
// call.
func (e *extractor) features(text string) []uint32 {
	e.out, e.pos = e.out[:0], e.pos[:0]
	e.flags = normFlags{}
	if e.seen == nil {
		e.seen = make([]uint64, e.mask+1)
	}
	e.gen++
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
	if e.spec.Block > 0 {
		block = p / e.spec.Block
	}
	// Features of one family come in order of position, so remembering the
	// last block a bucket was seen in is enough to count it once per block.
	key := e.gen<<32 | uint64(block+1)&0xffffffff
	if e.seen[f] == key {
		return
	}
	e.seen[f] = key
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
	// character n-grams over the bytes of the normalised text
	for n := int(e.spec.CharMin); n <= int(e.spec.CharMax) && n > 0; n++ {
		for i := 0; i+n <= len(norm); i++ {
			e.emit(hashBytes(seedChar+uint64(n), norm[i:i+n]), i)
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

func isB64(c byte) bool {
	return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' ||
		c == '+' || c == '/' || c == '-' || c == '_' || c == '='
}

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
