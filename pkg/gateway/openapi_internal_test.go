package gateway

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/getkin/kin-openapi/openapi3"
)

// api/openapi.yaml is true: it has every route the gateway serves and no
// other, and every error code the gateway answers and no other.
func TestOpenAPISpecMatchesTheRouter(t *testing.T) {
	raw, err := os.ReadFile("../../api/openapi.yaml")
	require.NoError(t, err)
	var spec struct {
		OpenAPI    string                               `yaml:"openapi"`
		Paths      map[string]map[string]map[string]any `yaml:"paths"`
		Components struct {
			Schemas struct {
				ErrorCode struct {
					Enum []string `yaml:"enum"`
				} `yaml:"ErrorCode"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &spec))
	require.True(t, strings.HasPrefix(spec.OpenAPI, "3."), "OpenAPI 3.x")

	g := &Gateway{}
	served := map[string]bool{}
	for _, rt := range g.routes() {
		key := strings.ToLower(rt.method) + " " + rt.pattern
		served[key] = true
		require.Contains(t, spec.Paths[rt.pattern], strings.ToLower(rt.method), "api/openapi.yaml lacks %s", key)
		require.Equal(t, rt.admin, strings.HasPrefix(rt.pattern, "/admin/"), "%s: the admin API is /admin/…", key)
	}
	for path, ops := range spec.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			require.True(t, served[method+" "+path], "api/openapi.yaml has %s %s, which the gateway does not serve", method, path)
		}
	}

	// Every code the package can answer, read off its source.
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, dir := range []string{"httpapi", "operator"} {
		more, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		files = append(files, more...)
	}
	re := regexp.MustCompile(`(?:NewError\(http\.[A-Za-z]+, |BadRequest\()"([a-z_]+)"`)
	codes := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range re.FindAllStringSubmatch(string(src), -1) {
			codes[m[1]] = true
		}
	}
	var inCode []string
	for c := range codes {
		inCode = append(inCode, c)
	}
	slices.Sort(inCode)
	documented := slices.Clone(spec.Components.Schemas.ErrorCode.Enum)
	slices.Sort(documented)
	require.Equal(t, inCode, documented, "the ErrorCode enum of api/openapi.yaml must be the codes the gateway answers")
}

// api/openapi.yaml is a valid OpenAPI document for a real validator
// (kin-openapi's loader and Validate), the check generated clients rely
// on: a YAML flow mapping whose description held a comma once split into
// an extra key ("extra sibling fields: [in minor units]"), which only a
// strict validator sees.
func TestOpenAPISpecIsValid(t *testing.T) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile("../../api/openapi.yaml")
	require.NoError(t, err)
	require.NoError(t, doc.Validate(loader.Context, openapi3.EnableSchemaFormatValidation()))
}

// docs/API.md's route tables name every route the gateway serves, and
// only those (a row's "…/x" is its first route's path with its last
// segment replaced).
func TestTheAPIDocListsEveryRoute(t *testing.T) {
	raw, err := os.ReadFile("../../docs/API.md")
	require.NoError(t, err)
	route := regexp.MustCompile("`(GET|POST|PATCH|PUT|DELETE) (/[^` ?]*)[^`]*`(, `…(/[^`]+)`)?")
	documented := map[string]bool{}
	for _, row := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(row, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(row[2:], " | ")
		m := route.FindStringSubmatch(cell)
		if m == nil {
			continue
		}
		documented[m[1]+" "+m[2]] = true
		if m[4] != "" {
			documented[m[1]+" "+m[2][:strings.LastIndex(m[2], "/")]+m[4]] = true
		}
	}
	served := map[string]bool{}
	for _, rt := range (&Gateway{}).routes() {
		served[rt.method+" "+rt.pattern] = true
	}
	require.Equal(t, slices.Sorted(maps.Keys(served)), slices.Sorted(maps.Keys(documented)), "docs/API.md's routes against the router")
}

// docs/API.md's rows that list a request's fields ({"name", "kind", ...})
// list the spec's fields of that request, all of them and no other.
func TestTheAPIDocListsEveryRequestField(t *testing.T) {
	raw, err := os.ReadFile("../../docs/API.md")
	require.NoError(t, err)
	spec, err := os.ReadFile("../../api/openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Paths      map[string]map[string]map[string]any `yaml:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `yaml:"properties"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(spec, &doc))
	fields := func(method, path string) []string {
		op := doc.Paths[path][strings.ToLower(method)]
		schema := op["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
		props, _ := schema["properties"].(map[string]any)
		if ref, ok := schema["$ref"].(string); ok {
			props = doc.Components.Schemas[ref[strings.LastIndex(ref, "/")+1:]].Properties
		}
		return slices.Sorted(maps.Keys(props))
	}
	row := regexp.MustCompile("^\\| `(POST|PATCH) (/[^` ]+)` with `\\{(\"[a-z_]+\"(?:, \"[a-z_]+\")*)\\}`")
	name := regexp.MustCompile(`"([a-z_]+)"`)
	checked := 0
	for _, l := range strings.Split(string(raw), "\n") {
		m := row.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var listed []string
		for _, n := range name.FindAllStringSubmatch(m[3], -1) {
			listed = append(listed, n[1])
		}
		slices.Sort(listed)
		require.Equal(t, fields(m[1], m[2]), listed, "docs/API.md's fields of %s %s against the spec", m[1], m[2])
		checked++
	}
	require.GreaterOrEqual(t, checked, 2, "the voucher's create and change rows")
}
