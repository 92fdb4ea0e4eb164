package conf

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"
)

// refuseMoreDocuments refuses a file of several YAML documents ("---"
// between them) when one after the first holds anything: viper, and every
// check here, reads the first alone, so what follows (a redis.addr, a
// typo) was ignored without a word, and a file whose first document is only
// a header comment started the service on its defaults, the embedded,
// volatile Redis among them. Files joined by a template or "cat a b" carry
// such separators. A document left empty after the first (a trailing
// "---") sets nothing, and passes.
func refuseMoreDocuments(raw []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	docs, filled := 0, 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return errors.New(withoutYAMLValues(err))
		}
		docs++
		if docs > 1 && !emptyDocument(&doc) {
			filled++
		}
	}
	if filled == 0 {
		return nil
	}
	return fmt.Errorf("the file holds %d YAML documents (separated by \"---\") and the service reads only the first: make it one document", docs)
}

// emptyDocument tells whether doc holds nothing: no content, a null
// ("---" then only comments, or "~"), or an empty mapping ("{}").
func emptyDocument(doc *yaml.Node) bool {
	if len(doc.Content) == 0 {
		return true
	}
	n := doc.Content[0]
	return (n.Kind == yaml.ScalarNode && n.Tag == "!!null") || (n.Kind == yaml.MappingNode && len(n.Content) == 0)
}
