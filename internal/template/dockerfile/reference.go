package dockerfile

import "regexp"

// reReference is the grammar of an image reference,
// [host[:port]/]path[:tag][@digest], from the distribution project.
var reReference = func() *regexp.Regexp {
	const (
		pathComponent   = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
		domainComponent = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
		host            = `(?:` + domainComponent + `(?:\.` + domainComponent + `)*|\[[a-fA-F0-9:]+\])`
		domain          = host + `(?::[0-9]+)?`
		name            = `(?:` + domain + `/)?` + pathComponent + `(?:/` + pathComponent + `)*`
		tag             = `[\w][\w.-]{0,127}`
		digest          = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}`
	)
	return regexp.MustCompile(`^(` + name + `)(?::` + tag + `)?(?:@` + digest + `)?$`)
}()

// validReference reports whether s is a well-formed image reference.
func validReference(s string) bool {
	m := reReference.FindStringSubmatch(s)
	return m != nil && len(m[1]) <= 255
}
