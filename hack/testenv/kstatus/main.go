// kstatus-check reads Kubernetes objects (a JSON array on stdin) and prints, per object, what
// sigs.k8s.io/cli-utils/pkg/kstatus (the library Flux and Helm 4 decide health with) says:
// one JSON object per line, {"status": "Current|InProgress|Failed|Terminating|Unknown",
// "message": "..."}, in input order.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

type result struct {
	Status  string `json:"status"`
	Message string `json:"message"`
}

func main() {
	var objects []json.RawMessage
	if err := json.NewDecoder(os.Stdin).Decode(&objects); err != nil {
		fmt.Fprintf(os.Stderr, "kstatus-check: stdin is not a JSON array of objects: %v\n", err)
		os.Exit(2)
	}
	out := json.NewEncoder(os.Stdout)
	for i, raw := range objects {
		// Unstructured's own decoding keeps integers int64, as kstatus reads them.
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			fmt.Fprintf(os.Stderr, "kstatus-check: object %d: %v\n", i, err)
			os.Exit(2)
		}
		res, err := status.Compute(obj)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus-check: object %d: %v\n", i, err)
			os.Exit(1)
		}
		if err := out.Encode(result{Status: res.Status.String(), Message: res.Message}); err != nil {
			fmt.Fprintf(os.Stderr, "kstatus-check: %v\n", err)
			os.Exit(1)
		}
	}
}
