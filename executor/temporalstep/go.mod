module github.com/docketrun/docket/executor/temporalstep

go 1.26.0

require github.com/docketrun/docket v0.0.0

require go.temporal.io/sdk v1.51.0 // indirect

replace github.com/docketrun/docket => ../..
