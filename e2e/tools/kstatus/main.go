// Command kstatus reads Kubernetes objects as JSON on standard input (one object, or a List)
// and prints, for each, one line: "<kind>/<name> <status> <message>", where status is what
// sigs.k8s.io/cli-utils' kstatus computes (Current, InProgress, Failed, Terminating, Unknown).
// A computation error exits 1 naming the object.
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	// Numbers as int64 where they are integers, as the apiserver's own decoding does
	// (kstatus reads metadata.generation as int64).
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: reading standard input: %v\n", err)
		os.Exit(2)
	}
	var object map[string]interface{}
	if err := json.Unmarshal(input, &object); err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: standard input is not a JSON object: %v\n", err)
		os.Exit(2)
	}
	items := []interface{}{object}
	if list, ok := object["items"].([]interface{}); ok {
		items = list
	}
	for _, item := range items {
		fields, ok := item.(map[string]interface{})
		if !ok {
			fmt.Fprintln(os.Stderr, "kstatus: an item is not an object")
			os.Exit(2)
		}
		u := &unstructured.Unstructured{Object: fields}
		result, err := status.Compute(u)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %s/%s: %v\n", u.GetKind(), u.GetName(), err)
			os.Exit(1)
		}
		fmt.Printf("%s/%s %s %s\n", u.GetKind(), u.GetName(), result.Status, result.Message)
	}
}
