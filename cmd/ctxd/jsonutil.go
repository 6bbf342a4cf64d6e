package main

import "encoding/json"

// jsonMarshal encodes plain Go structs such as reports and replies.
func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
