package llm

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// normalize lower-cases s and folds full-width digits, letters and a few
// symbols (．＄￥ and the ideographic space) to their ASCII forms, so that
// "３５元" and "35元" read the same. Full-width punctuation such as "，" is
// kept, so it is never mistaken for a thousands separator.
func normalize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		switch {
		case r >= '０' && r <= '９', r >= 'Ａ' && r <= 'Ｚ', r >= 'ａ' && r <= 'ｚ':
			r -= 0xFEE0
		case r == '．':
			r = '.'
		case r == '＄':
			r = '$'
		case r == '￥':
			r = '¥'
		case r == '\u3000':
			r = ' '
		case r == '’':
			r = '\''
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}

// isHan reports whether r is a CJK ideograph.
func isHan(r rune) bool { return unicode.Is(unicode.Han, r) }

// hasHan reports whether s contains a CJK ideograph; RuleModel then answers
// in Chinese.
func hasHan(s string) bool {
	for _, r := range s {
		if isHan(r) {
			return true
		}
	}
	return false
}

func isASCIILetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }

func isASCIIDigit(r rune) bool { return r >= '0' && r <= '9' }

func runeLen(s string) int { return utf8.RuneCountInString(s) }

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// findKeyword reports the byte offset of the first match of kw in text.
// Keywords made of ASCII characters must stand as whole words, optionally
// followed by a plural "s" or "es" ("taxi" matches "taxis" but "bus" does
// not match "business"); other keywords match anywhere.
func findKeyword(text, kw string) (int, bool) {
	if !isASCII(kw) {
		i := strings.Index(text, kw)
		return i, i >= 0
	}
	for from := 0; from <= len(text); {
		i := strings.Index(text[from:], kw)
		if i < 0 {
			return -1, false
		}
		start := from + i
		end := start + len(kw)
		if !wordCharBefore(text, start) {
			rest := text[end:]
			switch {
			case !wordCharAt(rest, 0):
				return start, true
			case strings.HasPrefix(rest, "s") && !wordCharAt(rest, 1):
				return start, true
			case strings.HasPrefix(rest, "es") && !wordCharAt(rest, 2):
				return start, true
			}
		}
		from = start + 1
	}
	return -1, false
}

func wordCharBefore(s string, i int) bool {
	if i == 0 {
		return false
	}
	r, _ := utf8.DecodeLastRuneInString(s[:i])
	return isASCIILetter(r)
}

func wordCharAt(s string, i int) bool {
	if i >= len(s) {
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isASCIILetter(r)
}

// findAny returns the smallest offset at which any of kws matches text.
func findAny(text string, kws ...string) (int, bool) {
	best, found := -1, false
	for _, kw := range kws {
		if i, ok := findKeyword(text, kw); ok && (!found || i < best) {
			best, found = i, true
		}
	}
	return best, found
}

func containsAny(text string, kws ...string) bool {
	_, ok := findAny(text, kws...)
	return ok
}
