package render

// StartOf returns the first neutral message a rendering rendered anew: 0
// when it rendered the whole context.
func StartOf(s *State) int { return s.start }
