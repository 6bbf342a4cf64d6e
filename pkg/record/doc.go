/*
Package record decodes session records, from msgpack or JSON, into values
that keep every field and every number exactly, and encodes them back.

A record is a map. [Decode] takes one payload, a JSON object or a msgpack
map told apart by the first byte, and returns it as a [*Map], whose
members keep the order they were read in:

	m, err := record.Decode(payload)
	if err != nil {
		// A *DecodeError: skip the record and report it.
	}
	role, _ := m.String("role")

# Values

A record value is one of these Go types, which together hold JSON's data
model without loss:

	nil       null
	bool      true, false
	string    a string (always valid UTF-8)
	int64     an integer that fits in int64
	uint64    an integer above math.MaxInt64 that fits in uint64
	float64   a finite msgpack float
	Number    any other JSON number, kept as its literal text
	[]any     an array
	*Map      a map with string keys, in the order they were read

Decoders produce only these types and encoders accept only these types.
A JSON number such as 1.5, -0, 1E400 or 18446744073709551617 stays a
[Number], so that it encodes back as written; [IsInteger], [IntegerString]
and [Equal] compare numbers by value, whatever their representation. A
msgpack timestamp becomes an RFC 3339 string and msgpack bin its base64
string; what has no place in the data model (other extension types,
non-string map keys, NaN) is an error, not a guess. Repeated keys keep
their first position and take the last value.

[AppendJSON] and [AppendMsgpack] encode values back, keeping key order.
JSON keeps every number as it was read; msgpack carries every number that
a 64-bit integer or a float64 holds exactly and rounds the others to the
nearest float64. [AppendBinary] writes the compact typed form snapshots
store values in, which carries every value exactly; a [BinaryReader]
reads it back, with the uvarints, counts and byte strings around it.

# Errors and limits

Every decoding error is a [*DecodeError] giving the format and byte
offset, and wrapping one of the sentinels such as [ErrTruncated] or
[ErrNotMap]; match them with errors.Is. Input that starts with a Unicode
byte order mark is refused as [ErrByteOrderMark], never read past the
mark: JSON must not carry one, and no msgpack value starts with one. A
[Decoder] bounds the input size and nesting depth; its zero value, used
by the package functions, allows [DefaultMaxBytes] and
[DefaultMaxDepth]. Hostile input fails in time and
memory proportional to its size.

# Memory

A decoded record never refers to the input buffer, which the caller may
reuse. The short strings of one record share a few blocks of memory, as
do its maps and arrays: a record is a handful of allocations rather than
one per value, and any part of it keeps those blocks alive.
*/
package record
