package inject

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// Heuristics: patterns with a clear meaning that name what fired and where.
// Each rule has literal triggers (lower case) checked first, so that the
// regular expression runs only on texts that may match. The rules were kept
// only where they fire on (almost) no benign text of the training split; the
// phrasings they know are few, so they are a tripwire beside the classifier,
// not a replacement for it.

// Hit is one heuristic match.
type Hit struct {
	Rule       string
	Kind       string // LabelInjection or LabelJailbreak
	Start, End int    // byte span in the inspected text
	Confidence float64
}

type rule struct {
	name       string
	kind       string
	confidence float64
	triggers   []string
	re         *regexp.Regexp
}

var rules = []rule{
	{
		name: "instruction_override", kind: LabelInjection, confidence: 0.9,
		triggers: []string{"ignore", "disregard", "forget", "overrid", "bypass", "follow"},
		re: regexp.MustCompile(`(?i)\b(?:ignore|disregard|forget(?: about)?|override|bypass|do not follow|don't follow|stop following)\s+` +
			`(?:(?:all|any|the|your|of|my|these|those)\s+)*` +
			`(?:(?:previous|prior|preceding|above|earlier|original|initial|system|developer|safety|existing|old)\s+` +
			`(?:\w+\s+)?(?:instructions?|prompts?|rules|directives?|guidelines|guardrails|constraints|programming|commands|context)\b` +
			`|(?:instructions?|prompts?|rules|directives?)\s+(?:above|before|given to you|you (?:were given|got|received|have been given)))`),
	},
	{
		name: "role_token", kind: LabelInjection, confidence: 0.9,
		triggers: []string{"<|", "[inst]", "[/inst]", "<<sys>>", "<</sys>>", "<system", "</system", "<important>"},
		re: regexp.MustCompile(`(?i)<\|(?:im_start|im_end|system|user|assistant|endoftext|begin_of_text|start_header_id|end_header_id|eot_id)\|>` +
			`|\[/?INST\]|<</?SYS>>|</?system(?:_prompt)?>|<IMPORTANT>`),
	},
	{
		name: "prompt_extraction", kind: LabelInjection, confidence: 0.8,
		triggers: []string{"prompt", "instructions"},
		re: regexp.MustCompile(`(?i)\b(?:reveal|print|show|repeat|output|display|leak|dump|tell me|give me|share|disclose)\b\s+` +
			`(?:me\s+)?(?:all\s+)?(?:your|the)\s+(?:full\s+|entire\s+|complete\s+|exact\s+)?(?:system|initial|original|hidden|secret)\s+(?:prompt|instructions|message)`),
	},
	{
		name: "jailbreak_persona", kind: LabelJailbreak, confidence: 0.85,
		triggers: []string{"anything now", "developer mode", "dan", "unrestricted", "unfiltered", "uncensored", "ethical", "moral", "safety", "alignment"},
		re: regexp.MustCompile(`(?i)\bdo anything now\b|\bdeveloper mode (?:enabled|output)\b|\bDAN mode\b` +
			`|\byou are (?:now )?(?:an? )?(?:unrestricted|unfiltered|uncensored)\b` +
			`|\b(?:no|without any|free of|freed from)\s+(?:ethical|moral)\s+(?:guidelines|restrictions|limits|constraints|boundaries)\b` +
			`|\b(?:ignore|ignoring|disregard|disregarding)\s+(?:(?:any|all|your)\s+)?(?:possible\s+)?(?:ethical|moral|safety|alignment)\s+` +
			`(?:implications|guidelines|considerations|concerns|training|policies|restrictions)\b`),
	},
}

// Invisible and encoded-content rules are code, not patterns.
const (
	ruleTagBlock  = "unicode_tag_block"
	ruleZeroWidth = "zero_width_text"
	ruleBidi      = "bidi_override"
	ruleBase64    = "encoded_base64"
	ruleROT13     = "encoded_rot13"
)

// heuristics returns the rule hits in text. score, when not nil, classifies
// decoded base64 payloads too.
func heuristics(text string, score func(string) Prediction, threshold float64) []Hit {
	var hits []Hit
	found, ascii := ruleTriggers.groups(text)
	for i := range rules {
		r := &rules[i]
		if found&(1<<i) == 0 {
			continue
		}
		for _, loc := range r.re.FindAllStringIndex(text, 8) {
			hits = append(hits, Hit{Rule: r.name, Kind: r.kind, Start: loc[0], End: loc[1], Confidence: r.confidence})
		}
	}
	if !ascii { // every invisible character is outside ASCII
		hits = append(hits, invisible(text)...)
	}
	hits = append(hits, encoded(text, found&(1<<rot13Group) != 0, score, threshold)...)
	return hits
}

func containsAnyOf(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// invisible finds Unicode tag characters (U+E0000–E007F: invisible ASCII that
// models read), words spelled with zero-width characters between their
// letters, and bidirectional overrides ("Trojan source").
func invisible(text string) []Hit {
	var hits []Hit
	tagStart, zwStart, zwEnd, zwCount := -1, -1, 0, 0
	var prev rune
	for i, r := range text {
		if r >= 0xE0000 && r <= 0xE007F {
			if tagStart < 0 {
				tagStart = i
			}
		} else if tagStart >= 0 {
			hits = append(hits, Hit{Rule: ruleTagBlock, Kind: LabelInjection, Start: tagStart, End: i, Confidence: 0.95})
			tagStart = -1
		}
		switch {
		case r == 0x200B || r == 0x200C || r == 0x2060 || r == 0x2063 || r == 0x200D && isASCIILetter(prev):
			// A zero-width character after a letter: text split so that
			// filters miss it. ZWJ inside emoji sequences is not counted.
			if isASCIILetter(prev) {
				if zwStart < 0 {
					zwStart = i
				}
				zwCount++
				zwEnd = i + utf8.RuneLen(r)
			}
		case r == 0x202D || r == 0x202E || r >= 0x2066 && r <= 0x2069:
			hits = append(hits, Hit{Rule: ruleBidi, Kind: LabelInjection, Start: i, End: i + utf8.RuneLen(r), Confidence: 0.6})
		}
		prev = r
	}
	if tagStart >= 0 {
		hits = append(hits, Hit{Rule: ruleTagBlock, Kind: LabelInjection, Start: tagStart, End: len(text), Confidence: 0.95})
	}
	if zwCount >= 3 {
		hits = append(hits, Hit{Rule: ruleZeroWidth, Kind: LabelInjection, Start: zwStart, End: zwEnd, Confidence: 0.7})
	}
	return hits
}

func isASCIILetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }

// encoded finds instructions in base64 runs (decoded, then matched by the
// rules or scored by the classifier) and in ROT13.
func encoded(text string, rot13Trigger bool, score func(string) Prediction, threshold float64) []Hit {
	var hits []Hit
	for _, run := range base64Runs(text) {
		dec, ok := decodeBase64Text(text[run[0]:run[1]])
		if !ok {
			continue
		}
		kind, conf := "", 0.0
		for i := range rules {
			if rules[i].re.MatchString(dec) {
				kind, conf = rules[i].kind, 0.9
				break
			}
		}
		if kind == "" && score != nil {
			if p := score(dec); p.Attack >= threshold {
				kind, conf = LabelInjection, p.Attack
				if p.Jailbreak > p.Injection {
					kind = LabelJailbreak
				}
			}
		}
		if kind != "" {
			hits = append(hits, Hit{Rule: ruleBase64, Kind: kind, Start: run[0], End: run[1], Confidence: conf})
		}
	}
	// ROT13 of "ignore", "disregard", "instructions".
	if rot13Trigger {
		if loc := rules[0].re.FindStringIndex(rot13(text)); loc != nil {
			hits = append(hits, Hit{Rule: ruleROT13, Kind: LabelInjection, Start: loc[0], End: loc[1], Confidence: 0.9})
		}
	}
	return hits
}

func rot13(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = 'a' + (c-'a'+13)%26
		case c >= 'A' && c <= 'Z':
			b[i] = 'A' + (c-'A'+13)%26
		}
	}
	return string(b)
}
