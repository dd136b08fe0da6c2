package token

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// BenchmarkVerifyHS256 is one user token's check on the fast path, as
// every claim pays it: go test -run '^$' -bench VerifyHS256 -benchmem ./pkg/token
func BenchmarkVerifyHS256(b *testing.B) {
	a := testAuth()
	tok, err := SignUserFor(testSecret, "4815162342", "", "", testNow.Add(time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Verify(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzNumericDate holds numericDate's shortcut for number literals to the
// decoding it skips (json.Number through json.Unmarshal), for any valid
// JSON value: the same time or both refused.
func FuzzNumericDate(f *testing.F) {
	for _, seed := range []string{`1700000000`, `-1`, `1.5e9`, `1e300`, `-0`, `0.000001`, `"1700000000"`, `"x"`, `null`, `{}`, `[1]`, `true`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var got numericDate
		gotErr := json.Unmarshal(b, &got)
		var want numericDate
		var n json.Number
		wantErr := json.Unmarshal(b, &n)
		if wantErr == nil {
			wantErr = want.fromNumber(n)
		}
		if (gotErr == nil) != (wantErr == nil) || !got.Equal(want.Time) {
			t.Fatalf("%q: got (%v, %v), want (%v, %v)", b, got.Time, gotErr, want.Time, wantErr)
		}
	})
}

// FuzzDecodeClaims holds the short way of decoding claims to
// json.Unmarshal: wherever simpleClaims takes a payload, json.Unmarshal
// takes it too and decodes the same claims; and decodeClaims, which falls
// back to it, always agrees with it.
func FuzzDecodeClaims(f *testing.F) {
	for _, seed := range []string{
		`{"sub":"4815162342","exp":1795000000}`,
		`{"iss":"https://idp.example","sub":"u1","aud":["flashsale","other"],"exp":1795000000.5,"nbf":1,"iat":-0,"jti":"x"}`,
		`{"sub":"a","aud":"flashsale","exp":1e9,"name":"Ann","admin":true,"x":null,"n":-1.5E+3}`,
		` { "sub" : "a" , "exp" : 0 } `, `{}`, `{"aud":[]}`, `{"sub":"a","sub":"b"}`, `{"exp":1,"exp":"2"}`,
		`{"SUB":"a"}`, `{"sub":"a\u0041"}`, `{"sub":null}`, `{"exp":01}`, `{"exp":1.}`, `{"exp":1e300}`,
		`{"o":{"a":1}}`, `{"sub":"é"}`, `{"a":tru}`, `{"sub":"a"} x`, `[]`, `null`, `{"sub":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want tokenClaims
		wantErr := json.Unmarshal(body, &want)
		var short tokenClaims
		if simpleClaims(body, &short) {
			if wantErr != nil {
				t.Fatalf("%q: taken by simpleClaims, refused by json.Unmarshal: %v", body, wantErr)
			}
			if !reflect.DeepEqual(short, want) {
				t.Fatalf("%q: simpleClaims %+v, json.Unmarshal %+v", body, short, want)
			}
		}
		var got tokenClaims
		gotErr := decodeClaims(body, &got)
		if (gotErr == nil) != (wantErr == nil) || (gotErr == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%q: decodeClaims (%+v, %v), json.Unmarshal (%+v, %v)", body, got, gotErr, want, wantErr)
		}
	})
}

// TestSimpleClaimsTakesWhatIdentityProvidersIssue: the short way is the
// common way, not a path only the fuzzer visits.
func TestSimpleClaimsTakesWhatIdentityProvidersIssue(t *testing.T) {
	for _, body := range []string{
		`{"sub":"4815162342","exp":1795000000}`,
		`{"iss":"https://idp.example/","sub":"auth0|5f7c8ec7c33c6c004bbafe82","aud":["https://api.flashsale","https://idp.example/userinfo"],"iat":1795000000,"exp":1795086400,"scope":"openid profile","azp":"x1"}`,
		`{"sub":"u","aud":"flashsale","exp":1795000000,"nbf":1794999000,"jti":"c0ffee","email_verified":true,"nonce":null}`,
	} {
		var c tokenClaims
		if !simpleClaims([]byte(body), &c) {
			t.Errorf("%s: not taken", body)
		}
	}
	for _, body := range []string{`{"Sub":"a"}`, `{"sub":"a\u0041"}`, `{"sub":null}`, `{"exp":"1"}`, `{"realm":{"roles":[]}}`, `{"exp":1e300}`} {
		var c tokenClaims
		if simpleClaims([]byte(body), &c) {
			t.Errorf("%s: taken, should be left to json.Unmarshal", body)
		}
	}
}
