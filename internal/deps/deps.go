package deps

import (
	_ "github.com/dgraph-io/badger/v4"
	_ "github.com/gorilla/websocket"
	_ "github.com/gowebpki/jcs"
	_ "github.com/invopop/jsonschema"
	_ "github.com/santhosh-tekuri/jsonschema/v6"
	_ "github.com/sashabaranov/go-openai"
	_ "go.uber.org/goleak"
)
