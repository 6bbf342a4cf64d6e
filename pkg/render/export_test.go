package render

// StartOf returns the first neutral message a rendering rendered anew: 0
// when it rendered the whole context.
func StartOf(s *State) int { return s.start }

// Compared returns how many neutral messages a rendering compared one by
// one with those of the state it went on from.
func Compared(s *State) int { return s.compared }
