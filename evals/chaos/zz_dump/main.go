package main

import (
	"context"
	"fmt"
	"os"

	"github.com/docketrun/docket/ledger"
)

func main() {
	ctx := context.Background()
	l, err := ledger.Open(ctx, ledger.Config{Dir: os.Args[1]})
	if err != nil {
		panic(err)
	}
	defer l.Close()
	evs, err := l.Events(ctx, os.Args[2], 0, 0)
	if err != nil {
		panic(err)
	}
	for _, e := range evs {
		if len(os.Args) > 3 && e.ActionID != os.Args[3] && e.ActionID != "" {
			continue
		}
		fmt.Printf("%d %s %s %s %s\n", e.Seq, e.At.Format("15:04:05.000"), e.Type, e.ActionID, string(e.Data))
	}
}
