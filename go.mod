module github.com/gollm/gollm

go 1.26.0

require (
	github.com/dlclark/regexp2 v1.11.5
	github.com/nlpodyssey/gotokenizers v0.2.0
	github.com/prometheus/client_golang v1.23.2
	github.com/prometheus/client_model v0.6.2
	github.com/prometheus/common v0.66.1
	github.com/spf13/pflag v1.0.10
	github.com/x448/float16 v0.8.4
	golang.org/x/term v0.37.0
	golang.org/x/text v0.44.0
	gorgonia.org/cu v0.9.6
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.1.1 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/prometheus/procfs v0.16.1 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	golang.org/x/sys v0.38.0 // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)
