package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

// problem is one thing wrong with the configuration, as an operator reads
// it: "config.yaml: upstream.rate: "abc" is not a number".
type problem struct {
	source string // the file's path, or the environment variable that set the value
	key    string // key path, as written in the file: upstream.rate, auth.clients[0].name
	msg    string // what is wrong, without the key
}

type problems []problem

// err is every problem, one a line, with the values of secrets taken out.
func (ps problems) err(secrets []string) error {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.source + ": " + p.key + ": " + p.msg
	}
	return errors.New(redact(strings.Join(lines, "\n"), secrets))
}

// sources tells where the value of a key came from.
type sources struct {
	file string            // the file's path
	env  map[string]string // key path -> the EDGE_* variable that set it
}

func (s sources) of(key string) string {
	if name, ok := s.env[key]; ok {
		return name
	}
	return s.file
}

// validate is Validate's problems for a configuration that decoded with
// ps, less those about a value that could not be read (it kept its
// default, or is missing, and the decode problem already says why).
func (ps problems) validate(c *Config, src sources, more []func(*Config) error) problems {
	errs := []error{c.Validate()}
	for _, check := range more {
		errs = append(errs, check(c))
	}
	err := errors.Join(errs...)
	if err == nil {
		return nil
	}
	var out problems
	for _, line := range strings.Split(err.Error(), "\n") {
		key, msg, _ := strings.Cut(line, ": ")
		base := validatedKey(key)
		if ps.covers(base) {
			continue
		}
		out = append(out, problem{source: src.of(base), key: key, msg: msg})
	}
	return out
}

// validatedKey is the key path at the head of a Validate message, without
// the client's name it may carry ("auth.clients[0] (web)").
func validatedKey(key string) string {
	key, _, _ = strings.Cut(key, " (")
	return key
}

// covers tells whether a decode problem is about key, a key above it, or
// (for a list such as auth.clients) an item of it.
func (ps problems) covers(key string) bool {
	for _, p := range ps {
		if p.key == key || strings.HasPrefix(key, p.key+".") || strings.HasPrefix(key, p.key+"[") ||
			strings.HasPrefix(p.key, key+"[") {
			return true
		}
	}
	return false
}

// decodeProblems turns mapstructure's error for the section at prefix into
// one problem per key: the value, and what the key takes.
func decodeProblems(prefix string, err error, src sources) problems {
	var out problems
	var walk func(err error)
	walk = func(err error) {
		var de *mapstructure.DecodeError
		switch e := err.(type) {
		case *mapstructure.DecodeError:
			de = e
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
			return
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
			return
		default:
			out = append(out, problem{source: src.file, key: prefix, msg: err.Error()})
			return
		}
		// A decode error holding others (a map's values) is walked into.
		var nested *mapstructure.DecodeError
		if errors.As(de.Unwrap(), &nested) {
			walk(de.Unwrap())
			return
		}
		name := de.Name()
		if strings.HasPrefix(name, "config.") {
			// mapstructure 2.5 names the top level by its Go type
			// (config.Config); no key of the file starts with "config".
			name = ""
		}
		key := joinKey(prefix, name)
		if unknown, ok := strings.CutPrefix(de.Unwrap().Error(), "has invalid keys: "); ok {
			for _, k := range strings.Split(unknown, ", ") {
				out = append(out, problem{source: src.file, key: joinKey(key, k), msg: "unknown key"})
			}
			return
		}
		out = append(out, problem{source: src.of(key), key: key, msg: valueProblem(key, de.Unwrap())})
	}
	walk(err)
	// mapstructure walks a map (cache.ttl) in Go's random order.
	slices.SortStableFunc(out, func(a, b problem) int { return strings.Compare(a.key, b.key) })
	return out
}

// joinKey appends mapstructure's name of a field (upstream.rate, [0].name,
// [block-list].head for a map's value, or "d", decodeWindows' one
// duration) to the key path of its section: auth.clients[0].name,
// cache.ttl.block-list.head.
func joinKey(prefix, name string) string {
	name = mapIndex.ReplaceAllString(name, ".$1")
	switch {
	case name == "" || name == "d" && prefix == "cache.stale_while_revalidate":
		return prefix
	case prefix == "":
		return strings.TrimPrefix(name, ".")
	case strings.HasPrefix(name, "[") || strings.HasPrefix(name, "."):
		return prefix + name
	}
	return prefix + "." + name
}

// valueProblem says what is wrong with a value: "abc" is not a number.
func valueProblem(key string, err error) string {
	var ve *valueError
	var pe *mapstructure.ParseError
	var ue *mapstructure.UnconvertibleTypeError
	switch {
	case errors.As(err, &ve):
		return ve.msg
	case errors.As(err, &pe):
		return describe(pe.Value, secretName(lastKey(key))) + " is not " + expected(pe.Expected.Type())
	case errors.As(err, &ue):
		return describe(ue.Value, secretName(lastKey(key))) + " is not " + expected(ue.Expected.Type())
	}
	return err.Error()
}

func lastKey(key string) string {
	if i := strings.LastIndexAny(key, ".]"); i >= 0 {
		return key[i+1:]
	}
	return key
}

// describe shows a value as the operator wrote it; the value of a secret
// only by its kind.
func describe(v any, secret bool) string {
	switch rv := reflect.ValueOf(v); {
	case v == nil:
		return "nothing"
	case rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array:
		return "a list"
	case rv.Kind() == reflect.Map || rv.Kind() == reflect.Struct:
		return "a section of keys"
	case secret && rv.Kind() == reflect.String:
		return "a string"
	case secret:
		return "a " + rv.Kind().String()
	case rv.Kind() == reflect.String:
		return strconv.Quote(rv.String())
	}
	return fmt.Sprint(v)
}

// expected names what a field of type t takes.
func expected(t reflect.Type) string {
	if t == durationType {
		return "a duration such as 5s"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	}
	return "a section of keys"
}

// valueError is a problem a decode hook found, said in full.
type valueError struct{ msg string }

func (e *valueError) Error() string { return e.msg }

var durationType = reflect.TypeOf(time.Duration(0))

// mapIndex is mapstructure's name of a map's value, [key], as against a
// list item's [0].
var mapIndex = regexp.MustCompile(`\[([^\]]*[^\]0-9][^\]]*)\]`)

// durationHook reads durations. A number without a unit is refused:
// mapstructure would take `timeout: 5` as 5 nanoseconds, and every call
// would then time out. 0 is 0 in any unit and needs none.
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != durationType {
		return data, nil
	}
	v := reflect.ValueOf(data)
	var number string
	switch from.Kind() {
	case reflect.String:
		s := strings.TrimSpace(v.String())
		if d, err := time.ParseDuration(s); err == nil {
			return d, nil
		}
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return nil, &valueError{fmt.Sprintf("%q is not a duration: write 5s, 250ms, 1m30s or 24h", s)}
		}
		number = s
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		number = strconv.FormatInt(v.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		number = strconv.FormatUint(v.Uint(), 10)
	case reflect.Float32, reflect.Float64:
		number = strconv.FormatFloat(v.Float(), 'f', -1, 64)
	default:
		return data, nil
	}
	if f, err := strconv.ParseFloat(number, 64); err == nil && f == 0 {
		return time.Duration(0), nil
	}
	return nil, &valueError{fmt.Sprintf("%s has no unit: write %ss (or %sms, %sm, %sh)", number, number, number, number, number)}
}
