package blob

// OpName names a put as the decorators count and trace it: "put_create"
// when it is create-only, "put_cas" when it is a compare-and-swap, "put"
// otherwise.
func (o PutOptions) OpName() string {
	switch {
	case o.IfNoneMatch:
		return "put_create"
	case o.IfMatch != "":
		return "put_cas"
	}
	return "put"
}
