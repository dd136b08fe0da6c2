// Package jsonstr appends strings as JSON, byte for byte as encoding/json
// writes them, for the JSON flashsale writes by hand where encoding/json's
// reflection cost more than the rest of the work: the outbox's rows and
// the events' bodies.
package jsonstr

import "encoding/json"

// Append appends s as a JSON string: as it is between quotes when it
// needs no escape (ids, statuses, reasons: the usual case), else as
// encoding/json writes it (its escapes of <, > and &, U+2028 and U+2029,
// and of invalid UTF-8, included).
func Append(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
