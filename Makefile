# `make test` is the README's test command: it installs what the tests need
# outside Go (.ci/extras: the pinned reference MCP servers with npm, Chromium
# and PostgreSQL's server binaries with apt-get when it may), then runs every
# test of the three Go modules under the race detector, with every extra
# required (DOCKET_REQUIRE_EXTRAS=1): it proves everything or fails saying
# what is missing. .ci/run runs it, then `make soak`.
#
#   make test         set-up + the whole suite (main module, executor/temporalstep, evals/bench/peers,
#                     ui/testdata/clientgen: a Go client generated from the served OpenAPI drives a run,
#                     cmd/docket/examples/temporal: the Temporal example's loop in Temporal's test environment),
#                     and ui's suite once more over HTTPS (DOCKET_TEST_TLS=1: 28-57s on 2 busy cores)
#   make soak         the long soak runs of cmd/docket (DOCKET_SOAK=1), which make test skips
#   make extras       only the set-up
#   make mcpservers   only the reference MCP servers (into .mcpservers)
#
# go test shows nothing of a passing package without -v, not even why a test
# was skipped: make test and make soak end with a summary of the tests the
# helpers skipped for a missing extra or a property of the machine (not root:
# no tmpfs to fill), read from the file $DOCKET_TEST_SKIPS names
# (evals/testextra; .ci/skips prints it). The file is inside the main module,
# so go test's cache sees it written: a package that skipped a test runs
# again next time rather than answering "(cached)" without recording its skips.

GO ?= go
GOTEST = $(GO) test -race
SKIPS = $(CURDIR)/.test-skips

# The soak tests of cmd/docket: the pattern lives in cmd/docket/soak_test.go
# (soakRun), which also fails a test that asks to be a soak test outside it.
SOAK_RUN = $(shell sed -n 's/^const soakRun = `\(.*\)`$$/\1/p' cmd/docket/soak_test.go)


.PHONY: test soak extras mcpservers

# The separate modules follow the main one through a replace, so their go.sum
# may lag behind requirements the main module gained since: -mod=mod lets go
# add them.
test: export DOCKET_REQUIRE_EXTRAS = 1
test: export DOCKET_TEST_SKIPS = $(SKIPS)
test: extras
	@rm -f $(SKIPS)
	$(GOTEST) -timeout 20m ./...
	DOCKET_TEST_TLS=1 $(GOTEST) -timeout 5m ./ui/
	cd executor/temporalstep && GOFLAGS=-mod=mod $(GOTEST) -timeout 8m ./...
	cd evals/bench/peers && GOFLAGS=-mod=mod $(GOTEST) -timeout 6m ./...
	# go get: the generator's own packages need go.sum lines for the main module's current requirements
	cd ui/testdata/clientgen && GOFLAGS=-mod=mod go get github.com/oapi-codegen/oapi-codegen/v2/pkg/codegen@v2.8.2 && GOFLAGS=-mod=mod $(GOTEST) -timeout 6m ./...
	cd cmd/docket/examples/temporal && GOFLAGS=-mod=mod $(GOTEST) -timeout 5m ./...
	@.ci/skips $(SKIPS)

soak: export DOCKET_SOAK = 1
soak: export DOCKET_REQUIRE_EXTRAS = 1
soak: export DOCKET_TEST_SKIPS = $(SKIPS)
soak: extras
	@test -n '$(SOAK_RUN)' || { echo 'make soak: no soakRun in cmd/docket/soak_test.go'; exit 1; }
	@rm -f $(SKIPS)
	$(GOTEST) -timeout 18m -run '$(SOAK_RUN)' ./cmd/docket
	@.ci/skips $(SKIPS)

extras:
	.ci/extras

mcpservers:
	.ci/extras mcpservers
