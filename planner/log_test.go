package planner_test

import (
	"io"
	"log/slog"
)

func slogText(w io.Writer, v any) {
	slog.New(slog.NewTextHandler(w, nil)).Info("config", "cfg", v)
}
