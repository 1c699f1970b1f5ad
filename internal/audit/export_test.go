package audit

// EventMACForTest exposes eventMAC to the tests, which forge events as
// someone holding the key would.
func EventMACForTest(key []byte, seq int64, e Event) []byte {
	m, _ := eventMAC(key, seq, e)
	return m
}
