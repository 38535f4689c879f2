package cel

import (
	"reflect"

	celgo "github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/ext"
	"github.com/kyverno/sdk/extensions/cel/libs/globalcontext"
	"github.com/kyverno/sdk/extensions/cel/libs/gzip"
	"github.com/kyverno/sdk/extensions/cel/libs/hash"
	sdkhttp "github.com/kyverno/sdk/extensions/cel/libs/http"
	"github.com/kyverno/sdk/extensions/cel/libs/image"
	"github.com/kyverno/sdk/extensions/cel/libs/imagedata"
	sdkjson "github.com/kyverno/sdk/extensions/cel/libs/json"
	sdkmath "github.com/kyverno/sdk/extensions/cel/libs/math"
	"github.com/kyverno/sdk/extensions/cel/libs/random"
	"github.com/kyverno/sdk/extensions/cel/libs/resource"
	sdktime "github.com/kyverno/sdk/extensions/cel/libs/time"
	"github.com/kyverno/sdk/extensions/cel/libs/transform"
	"github.com/kyverno/sdk/extensions/cel/libs/user"
	"github.com/kyverno/sdk/extensions/cel/libs/x509"
	sdkyaml "github.com/kyverno/sdk/extensions/cel/libs/yaml"
	"k8s.io/apimachinery/pkg/util/version"
	plugincel "k8s.io/apiserver/pkg/admission/plugin/cel"
	apiservercel "k8s.io/apiserver/pkg/cel"
	"k8s.io/apiserver/pkg/cel/common"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/apiserver/pkg/cel/library"
	"k8s.io/apiserver/pkg/cel/mutation"
)

// kyvernoCompilerVersion is the version Kyverno 1.19 builds its MutatingPolicy
// environment at (pkg/cel/policies/mpol/compiler: mpolCompilerVersion): every library of
// the API server's base environment, at its newest version.
var kyvernoCompilerVersion = version.MajorMinor(2, 0)

// Names of the variables of Kyverno's MutatingPolicy environment.
const (
	varObject          = "object"
	varOldObject       = "oldObject"
	varRequest         = "request"
	varNamespaceObject = "namespaceObject"
	varVariables       = "variables"
	varExceptions      = "exceptions"
)

var (
	// kyvernoVariablesType is the type of `variables` in a Kyverno policy; each policy
	// declares its own fields (see variablesProvider).
	kyvernoVariablesType = types.NewObjectType("kyverno.variables")
	// kyvernoRequestType is the API server's request type with object and oldObject,
	// which Kyverno adds (pkg/cel/compiler: BuildRequestType).
	kyvernoRequestType = buildKyvernoRequestType()
	kyvernoNamespace   = plugincel.BuildNamespaceType()
	// applyConfigType and jsonPatchType are the results of Kyverno's mutations.
	applyConfigType = types.NewObjectType("Object")
	jsonPatchType   = types.NewObjectType("JSONPatch")
)

func buildKyvernoRequestType() *apiservercel.DeclType {
	t := plugincel.BuildRequestType()
	t.Fields[varObject] = apiservercel.NewDeclField(varObject, apiservercel.DynType, false, nil, nil)
	t.Fields[varOldObject] = apiservercel.NewDeclField(varOldObject, apiservercel.DynType, false, nil, nil)
	return t
}

// ExceptionValues is the `exceptions` variable of a Kyverno policy: the images and values
// the matching PolicyExceptions that carry images or allowedValues allow.
type ExceptionValues struct {
	AllowedImages []string `cel:"allowedImages"`
	AllowedValues []string `cel:"allowedValues"`
}

// exceptionValuesTypeName is the CEL name ext.NativeTypes gives ExceptionValues.
var exceptionValuesTypeName = "cel.ExceptionValues"

// kyvernoHosts holds what Kyverno's libraries read: the objects of resource.*, the
// entries of globalContext.*, the image data of image.getMetadata and the http caller.
type kyvernoHosts struct {
	resources resource.ContextInterface
	global    globalcontext.ContextInterface
	images    imagedata.ContextInterface
	http      sdkhttp.ContextInterface
}

// variablesProvider declares the fields of `variables` as a policy's variables are
// compiled: each variable has the type of its expression.
type variablesProvider struct {
	types.Provider
	fields map[string]*types.Type
	names  []string
}

func (p *variablesProvider) register(name string, t *types.Type) {
	if _, ok := p.fields[name]; !ok {
		p.names = append(p.names, name)
	}
	p.fields[name] = t
}

func (p *variablesProvider) FindStructType(name string) (*types.Type, bool) {
	if name == kyvernoVariablesType.DeclaredTypeName() {
		return types.NewTypeTypeWithParam(kyvernoVariablesType), true
	}
	return p.Provider.FindStructType(name)
}

func (p *variablesProvider) FindStructFieldNames(name string) ([]string, bool) {
	if name == kyvernoVariablesType.DeclaredTypeName() {
		return p.names, true
	}
	return p.Provider.FindStructFieldNames(name)
}

func (p *variablesProvider) FindStructFieldType(name, field string) (*types.FieldType, bool) {
	if name == kyvernoVariablesType.DeclaredTypeName() {
		if t, ok := p.fields[field]; ok {
			return &types.FieldType{Type: t}, true
		}
		return nil, false
	}
	return p.Provider.FindStructFieldType(name, field)
}

// orValueMacro is Kyverno's compatibility macro: x.orValue(y) is y when x is an error or
// an empty optional, else x (or the optional's value).
func orValueOptions() []celgo.EnvOption {
	return []celgo.EnvOption{
		celgo.Macros(celgo.ReceiverMacro("orValue", 1, func(eh celgo.MacroExprFactory, target celast.Expr, args []celast.Expr) (celast.Expr, *celgo.Error) {
			return eh.NewCall("__orValueCompat__", target, args[0]), nil
		})),
		celgo.Function("__orValueCompat__", celgo.Overload("__orValueCompat___dyn_dyn",
			[]*celgo.Type{celgo.DynType, celgo.DynType}, celgo.DynType,
			celgo.BinaryBinding(func(lhs, rhs ref.Val) ref.Val {
				switch v := lhs.(type) {
				case *types.Optional:
					if v.HasValue() {
						return v.GetValue()
					}
					return rhs
				case *types.Err:
					return rhs
				}
				return lhs
			}))),
	}
}

// newKyvernoEnv builds the environment Kyverno 1.19 compiles a MutatingPolicy in: the
// API server's base environment at kyvernoCompilerVersion; cel-go's Bindings, Encoders,
// Lists, Math, Protos, Sets, Strings and Regex extensions and the API server's libraries
// (as Kyverno's DefaultEnvOptions list them); the orValue macro; the variables object,
// oldObject, request (with object and oldObject), namespaceObject, variables and
// exceptions; the JSON patch library (jsonpatch.escapeKey) in every expression; and the
// kyverno/sdk libraries. namespace is a NamespacedMutatingPolicy's namespace ("" for a
// MutatingPolicy): resource.* then has only the overloads without a namespace, and
// globalContext.* and http.* fail, as in Kyverno.
func newKyvernoEnv(h kyvernoHosts, namespace string) (*celgo.Env, *variablesProvider, error) {
	base := environment.MustBaseEnvSet(kyvernoCompilerVersion)
	env, err := base.Env(environment.StoredExpressions)
	if err != nil {
		return nil, nil, err
	}
	vars := &variablesProvider{Provider: env.CELTypeProvider(), fields: map[string]*types.Type{}}
	declOptions, err := apiservercel.NewDeclTypeProvider(kyvernoNamespace, kyvernoRequestType).EnvOptions(vars)
	if err != nil {
		return nil, nil, err
	}
	opts := []celgo.EnvOption{
		celgo.HomogeneousAggregateLiterals(),
		celgo.EagerlyValidateDeclarations(true),
		celgo.DefaultUTCTimeZone(true),
		celgo.CrossTypeNumericComparisons(true),
		celgo.OptionalTypes(),
		ext.Bindings(),
		ext.Encoders(),
		ext.Lists(ext.ListsVersion(3)),
		ext.Math(),
		ext.Protos(),
		ext.Sets(),
		ext.Strings(ext.StringsVersion(2)),
		ext.Regex(ext.RegexVersion(1)),
		library.CIDR(),
		library.Format(),
		library.IP(),
		library.Lists(),
		library.Regex(),
		library.URLs(),
		library.Quantity(),
		library.SemverLib(library.SemverVersion(1)),
	}
	opts = append(opts, orValueOptions()...)
	opts = append(opts,
		celgo.Variable(varNamespaceObject, kyvernoNamespace.CelType()),
		celgo.Variable(varObject, celgo.DynType),
		celgo.Variable(varOldObject, celgo.DynType),
		celgo.Variable(varRequest, kyvernoRequestType.CelType()),
		celgo.Types(kyvernoNamespace.CelType()),
		celgo.Types(kyvernoRequestType.CelType()),
		celgo.Types(applyConfigType),
		celgo.Types(jsonPatchType),
		celgo.Variable(varVariables, kyvernoVariablesType),
	)
	opts = append(opts, declOptions...)
	opts = append(opts, common.ResolverEnvOption(&mutation.DynamicTypeResolver{}))

	global := h.global
	httpCtx := h.http
	if namespace != "" {
		global = namespacedGlobalContext{}
		httpCtx = namespacedHTTP{}
	}
	// The cel-go extensions come first, the sdk libraries after: a plain library
	// registered after the sdk's environment extensions is lost to the type checker.
	libs := []celgo.EnvOption{
		ext.NativeTypes(reflect.TypeFor[ExceptionValues](), ext.ParseStructTags(true)),
		celgo.Variable(varExceptions, types.NewObjectType(exceptionValuesTypeName)),
		environment.UnversionedLib(library.JSONPatch),
		globalcontext.Lib(globalcontext.Context{ContextInterface: global}, globalcontext.Latest()),
		resource.Lib(resource.Context{ContextInterface: h.resources}, namespace, resource.Latest()),
		image.Lib(image.Latest()),
		imagedata.Lib(imagedata.Context{ContextInterface: h.images}, imagedata.Latest(), nil),
		hash.Lib(hash.Latest()),
		sdkmath.Lib(sdkmath.Latest()),
		sdkjson.Lib(&sdkjson.JsonImpl{}, sdkjson.Latest()),
		sdkyaml.Lib(&sdkyaml.YamlImpl{}, sdkyaml.Latest()),
		random.Lib(random.Latest()),
		x509.Lib(x509.Latest()),
		sdktime.Lib(sdktime.Latest()),
		transform.Lib(transform.Latest()),
		gzip.Lib(gzip.Latest()),
		user.Lib(user.Latest()),
		sdkhttp.Lib(sdkhttp.Context{ContextInterface: httpCtx}, sdkhttp.Latest()),
	}
	extended, err := base.Extend(
		environment.VersionedOptions{IntroducedVersion: kyvernoCompilerVersion, EnvOptions: opts},
		environment.VersionedOptions{IntroducedVersion: kyvernoCompilerVersion, EnvOptions: libs},
	)
	if err != nil {
		return nil, nil, err
	}
	out, err := extended.Env(environment.StoredExpressions)
	if err != nil {
		return nil, nil, err
	}
	return out, vars, nil
}
