"""The JSON schemas, regexes and choices that the structured-output validity
tests generate for: random walks (test_walk.py) and the real model through the
server (tests/server/test_structured_e2e.py). Varied on purpose: nested
objects, arrays with item bounds, enums, bounded numbers, optional and required
properties, additionalProperties false, formats, patterns, unions, $ref."""

SCHEMAS = {
    "person": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 24},
                       "age": {"type": "integer", "minimum": 0, "maximum": 150}},
        "required": ["name", "age"], "additionalProperties": False},
    "nested_address": {
        "type": "object",
        "properties": {
            "user": {"type": "object",
                     "properties": {"id": {"type": "integer", "minimum": 1},
                                    "address": {"type": "object",
                                                "properties": {"city": {"type": "string", "maxLength": 30},
                                                               "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                                                "required": ["city", "zip"], "additionalProperties": False}},
                     "required": ["id", "address"], "additionalProperties": False}},
        "required": ["user"], "additionalProperties": False},
    "tags_bounded": {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                "minItems": 2, "maxItems": 4}},
        "required": ["tags"], "additionalProperties": False},
    "enum_color": {
        "type": "object",
        "properties": {"color": {"type": "string", "enum": ["red", "green", "blue"]},
                       "shade": {"enum": ["light", "dark", None, 3]}},
        "required": ["color", "shade"], "additionalProperties": False},
    "bounded_numbers": {
        "type": "object",
        "properties": {"ratio": {"type": "number", "minimum": 0, "maximum": 1},
                       "temp": {"type": "number", "exclusiveMinimum": -40.5, "exclusiveMaximum": 60},
                       "count": {"type": "integer", "minimum": -5, "maximum": 5}},
        "required": ["ratio", "temp", "count"], "additionalProperties": False},
    "optional_fields": {
        "type": "object",
        "properties": {"title": {"type": "string", "maxLength": 40},
                       "subtitle": {"type": "string", "maxLength": 40},
                       "pages": {"type": "integer", "minimum": 1, "maximum": 2000}},
        "required": ["title"], "additionalProperties": False},
    "formats": {
        "type": "object",
        "properties": {"email": {"type": "string", "format": "email"},
                       "ip": {"type": "string", "format": "ipv4"},
                       "id": {"type": "string", "format": "uuid"}},
        "required": ["email", "ip", "id"], "additionalProperties": False},
    "formats_time": {
        "type": "object",
        "properties": {"day": {"type": "string", "format": "date"},
                       "at": {"type": "string", "format": "date-time"},
                       "clock": {"type": "string", "format": "time"},
                       "v6": {"type": "string", "format": "ipv6"},
                       "ptr": {"type": "string", "format": "json-pointer"}},
        "required": ["day", "at", "clock", "v6", "ptr"], "additionalProperties": False},
    "patterns": {
        "type": "object",
        "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3,5}$"},
                       "phone": {"type": "string", "pattern": "^\\+[0-9]{2} [0-9]{3} [0-9]{4}$"}},
        "required": ["sku", "phone"], "additionalProperties": False},
    "optional_groups": {
        "type": "object",
        "properties": {"price": {"type": "string", "pattern": "^[0-9]{1,4}(\\.[0-9]+)?$"},
                       "code": {"type": "string", "pattern": "^a(xy{1,5})?b$"}},
        "required": ["price", "code"], "additionalProperties": False},
    "array_of_objects": {
        "type": "array", "minItems": 1, "maxItems": 3,
        "items": {"type": "object",
                  "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9},
                                 "y": {"type": "boolean"}},
                  "required": ["x", "y"], "additionalProperties": False}},
    "nullable_union": {
        "type": "object",
        "properties": {"note": {"anyOf": [{"type": "string", "maxLength": 16}, {"type": "null"}]},
                       "score": {"type": ["integer", "null"], "minimum": 0, "maximum": 10}},
        "required": ["note", "score"], "additionalProperties": False},
    "refs": {
        "$defs": {"point": {"type": "object",
                            "properties": {"x": {"type": "integer", "minimum": -9, "maximum": 9},
                                           "y": {"type": "integer", "minimum": -9, "maximum": 9}},
                            "required": ["x", "y"], "additionalProperties": False}},
        "type": "object",
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}},
        "required": ["start", "end"], "additionalProperties": False},
    "recursive_tree": {
        "$defs": {"node": {"type": "object",
                           "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 99},
                                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                   "maxItems": 2}},
                           "required": ["v"], "additionalProperties": False}},
        "$ref": "#/$defs/node"},
    "const_and_bool": {
        "type": "object",
        "properties": {"version": {"const": 2}, "ok": {"type": "boolean"}, "nothing": {"type": "null"}},
        "required": ["version", "ok", "nothing"], "additionalProperties": False},
    "tuple": {
        "type": "array", "prefixItems": [{"type": "string", "maxLength": 8}, {"type": "integer"},
                                         {"type": "boolean"}],
        "items": False},
    "string_lengths": {
        "type": "object",
        "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 6},
                       "word": {"type": "string", "minLength": 1, "maxLength": 10}},
        "required": ["code", "word"], "additionalProperties": False},
    "discriminated": {
        "type": "object",
        "properties": {"pet": {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "minimum": 0, "maximum": 9}},
             "required": ["kind", "lives"], "additionalProperties": False},
            {"type": "object", "properties": {"kind": {"const": "dog"}, "good": {"type": "boolean"}},
             "required": ["kind", "good"], "additionalProperties": False}]}},
        "required": ["pet"], "additionalProperties": False},
    "map_values": {
        "type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 100},
        "maxProperties": 3},
    "pattern_properties": {
        "type": "object", "patternProperties": {"^x_[a-z]{1,4}$": {"type": "string", "maxLength": 5}},
        "additionalProperties": False, "maxProperties": 3},
    "multiple_of": {
        "type": "object", "properties": {"step": {"type": "integer", "multipleOf": 5, "minimum": 0, "maximum": 100}},
        "required": ["step"], "additionalProperties": False},
    "matrix": {
        "type": "array", "minItems": 2, "maxItems": 2,
        "items": {"type": "array", "minItems": 2, "maxItems": 2,
                  "items": {"type": "number", "minimum": -1, "maximum": 1}}},
    "event": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 20},
                       "attendees": {"type": "array", "maxItems": 3,
                                     "items": {"type": "object",
                                               "properties": {"email": {"type": "string", "format": "email"},
                                                              "role": {"enum": ["host", "guest"]}},
                                               "required": ["email", "role"], "additionalProperties": False}},
                       "priority": {"type": "integer", "minimum": 1, "maximum": 3}},
        "required": ["name", "attendees", "priority"], "additionalProperties": False},
    "invoice": {
        "type": "object",
        "properties": {"number": {"type": "string", "pattern": "^INV-[0-9]{4}$"},
                       "lines": {"type": "array", "minItems": 1, "maxItems": 3,
                                 "items": {"type": "object",
                                           "properties": {"sku": {"type": "string", "maxLength": 8},
                                                          "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                                                          "price": {"type": "number", "minimum": 0, "maximum": 1000}},
                                           "required": ["sku", "qty", "price"], "additionalProperties": False}},
                       "paid": {"type": "boolean"}},
        "required": ["number", "lines", "paid"], "additionalProperties": False},
    "min_properties": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
        "minProperties": 2, "additionalProperties": False},
}

REGEXES = {
    "sku": "[A-Z]{3}-[0-9]{4}",
    "date_like": "(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9])",
    "words": "(cat|dog|bird)( (cat|dog|bird)){0,3}",
    "hex": "0x[0-9a-f]{1,8}",
}

CHOICES = {
    "yes_no": ["yes", "no"],
    "sentiment": ["positive", "negative", "neutral", "mixed feelings"],
    "unicode": ["café", "naïve", "日本語"],
}

GRAMMARS = {
    "arith": 'root ::= expr\nexpr ::= term ("+" term)*\nterm ::= [0-9]+ | "(" expr ")"',
}
