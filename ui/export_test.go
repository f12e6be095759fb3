package ui

// SetBeforeWrite holds WebSocket writers back in tests (slow consumers).
func (s *Server) SetBeforeWrite(f func()) { s.beforeWrite = f }
