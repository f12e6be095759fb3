package mcptool_test

import (
	"context"
	"fmt"
	"os"

	"github.com/docketrun/docket/tools"
	"github.com/docketrun/docket/tools/httptool"
	"github.com/docketrun/docket/tools/mcptool"
)

// Connecting the MCP servers of a tools file and registering their tools
// next to the HTTP tools. (Not run: it needs the servers the file names.)
func ExampleConnect() {
	ctx := context.Background()
	f, err := httptool.Load("tools.json", os.Getenv)
	if err != nil {
		fmt.Println(err)
		return
	}
	set, err := mcptool.Connect(ctx, f.MCPServers, &mcptool.Options{Env: os.Getenv})
	if err != nil {
		fmt.Println(err) // a *mcptool.ConnectError naming the server
		return
	}
	defer set.Close() // stops the local servers
	reg, err := tools.NewRegistry(append(f.Tools, set.Tools()...)...)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range reg.Names() {
		s, _ := reg.Spec(name)
		fmt.Println(name, s.Class) // e.g. "memory.create_entities lookup"
	}
}
