package ui

// SetBeforeWrite holds WebSocket writers back in tests (slow consumers).
func (s *Server) SetBeforeWrite(f func()) { s.beforeWrite = f }

// SetAfterUpgrade runs f between an all-runs client's upgrade answer and its
// registration (a client that acts at once on its answered upgrade).
func (s *Server) SetAfterUpgrade(f func()) { s.afterUpgrade.Store(&f) }
